"""Connections that have not yet sent a request: bounded in number and in time.

Until its TLS handshake and a request's headers are complete, a connection has shown
neither kube-scheduler's client certificate nor a token: anyone who can reach the port may
hold it. A client that opens connections and sends nothing, or trickles its handshake or its
headers a byte at a time (slowloris), would keep each one open for as long as it likes. So
each listener keeps its connections that wait for a request in one `Pending` set:

- each is closed `timeout` seconds (settings.listen.header_timeout_seconds) after it began to wait:
  from its accept for a new connection, from the first byte of a request on a kept-alive one;
- when `limit` wait at once (settings.listen.max_pending_connections), a new one closes the oldest:
  a flood of slow connections cannot keep out a client that sends its request at once, which
  is done waiting long before it would be the oldest.

Used by the uvicorn protocol (extender.http.protocol), the verbs' HTTP/2 listener
(extender.http.verbs_listener) and, for both, the TLS handshake (extender.http.tls).
Runs on the event loop; every operation is O(1).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Literal, Protocol

Why = Literal["timeout", "evicted"]


class Waiter(Protocol):
    def expire(self) -> None:
        """Close the connection (with a 408 when a reply can still be written)."""
        ...


class Pending:
    def __init__(
        self, limit: int, timeout: float, closed: Callable[[Why], None] = lambda _: None
    ) -> None:
        self.limit = limit
        self.timeout = timeout
        self._closed = closed  # told of each connection closed for waiting too long or too many
        # Oldest first; each with the timer that closes it.
        self._waiting: dict[Waiter, asyncio.TimerHandle] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def wait(self, waiter: Waiter) -> None:
        """`waiter` waits for its request from now (no-op if it already waits)."""
        if waiter in self._waiting:
            return
        while len(self._waiting) >= self.limit:
            self._expire(next(iter(self._waiting)), "evicted")
        loop = asyncio.get_running_loop()
        self._waiting[waiter] = loop.call_later(self.timeout, self._expire, waiter, "timeout")

    def done(self, waiter: Waiter) -> None:
        """`waiter` has its request (or is gone): it no longer waits."""
        timer = self._waiting.pop(waiter, None)
        if timer is not None:
            timer.cancel()

    def _expire(self, waiter: Waiter, why: Why) -> None:
        self.done(waiter)
        self._closed(why)
        waiter.expire()
