"""The bind barrier: a gang's members wait at bind until enough of them are there.

kube-scheduler binds every pod in its own goroutine, through the extender's bind verb. A
member's bind waits here, on the event loop (no thread is held), until the gang's minimum is
at bind or bound; then every waiting member binds, woken WAKE_BATCH to a turn of the loop. A
barrier belongs to one reservation of one gang: it is opened when the gang is ready, and
cancelled (waking every waiter with the reason) when the reservation is released or the gang
ends, so nothing outlives its gang. Created and driven by the gang manager; awaited by
extender.scheduling.verbs.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from enum import Enum


class Wake(Enum):
    OPEN = "open"  # the gang's minimum is there: bind now
    CANCELLED = "cancelled"  # the place is gone (released, or the gang ended)
    TIMED_OUT = "timed out"  # not enough members reached bind in time


@dataclass(frozen=True, slots=True)
class Woken:
    """How a member's wait at the barrier ended, and why it may not bind (if it may not)."""

    wake: Wake
    reason: str = ""


_OPEN = Woken(Wake.OPEN)


# Waiters woken per turn of the event loop: each starts its Binding, and 1,024 of them in one
# turn held the loop for all of their starts; the binder has 64 connections anyway.
WAKE_BATCH = 64


class Barrier:
    def __init__(self) -> None:
        # Uids of members waiting at bind, each with its calls waiting: kube-scheduler may
        # call again for a member whose earlier call it gave up on (a connection lost) while
        # that one still waits here, and the member is at bind while either does.
        self.waiting: dict[str, int] = {}
        self._waiters: deque[asyncio.Future[None]] = deque()  # in arrival order
        self._woken: Woken | None = None  # how it ended: open, or cancelled with why

    @property
    def is_open(self) -> bool:
        return self._woken is _OPEN

    def open(self) -> None:
        if self._woken is None:
            self._woken = _OPEN
            self._wake()

    def cancel(self, reason: str) -> None:
        """Wake every waiter with `reason`: the place they were to bind to is gone."""
        self._woken = Woken(Wake.CANCELLED, reason)
        self._wake()

    def _wake(self) -> None:
        """Wake the next WAKE_BATCH waiters, and the rest in the loop's next turns."""
        for _ in range(min(WAKE_BATCH, len(self._waiters))):
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
        if self._waiters:
            asyncio.get_running_loop().call_soon(self._wake)

    def arrive(self, uid: str) -> None:
        """Member `uid` is at bind: one more call of it to wait."""
        self.waiting[uid] = self.waiting.get(uid, 0) + 1

    async def wait(self, uid: str, timeout: float) -> Woken:
        """Wait (after `arrive`) until the barrier opens, is cancelled, or `timeout` passes."""
        try:
            if self._woken is None:
                waiter = asyncio.get_running_loop().create_future()
                self._waiters.append(waiter)
                async with asyncio.timeout(timeout):
                    await waiter
        except TimeoutError:
            return Woken(Wake.TIMED_OUT, f"not enough members reached bind within {timeout:g}s")
        finally:
            self.leave(uid)
        assert self._woken is not None
        return self._woken

    def leave(self, uid: str) -> None:
        """One call of member `uid` stopped waiting."""
        left = self.waiting.get(uid, 0) - 1
        if left > 0:
            self.waiting[uid] = left
        else:
            self.waiting.pop(uid, None)
