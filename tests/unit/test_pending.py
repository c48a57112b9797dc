"""extender.http.pending: connections that wait for a request are bounded in time and
number.

The Pending set is driven on a real event loop with short timeouts. A TLS handshake waiting
among them from the accept is the process tier's (tests/process/test_process_tls_handshake.py:
its certificate is made by openssl); the listeners themselves, attacked by slow clients, are
the fuzz tier's (tests/fuzz/test_fuzz_slowloris.py).
"""

from __future__ import annotations

import asyncio

import pytest

from extender.http.pending import Pending, Why


class Conn:
    def __init__(self, name: str) -> None:
        self.name = name
        self.expired = 0

    def expire(self) -> None:
        self.expired += 1


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("limit", "arrivals", "done", "evicted"),
    [
        (3, ["a", "b"], [], []),
        (2, ["a", "b", "c"], [], ["a"]),  # the oldest goes
        (2, ["a", "b", "c", "d"], [], ["a", "b"]),
        (2, ["a", "b", "c"], ["a"], []),  # done before the third: no eviction
        (1, ["a", "a", "a"], [], []),  # waiting again is a no-op
    ],
)
def test_past_the_limit_the_oldest_waiting_connection_is_closed(
    limit: int, arrivals: list[str], done: list[str], evicted: list[str]
) -> None:
    async def go() -> None:
        closed: list[Why] = []
        pending = Pending(limit, 60, closed.append)
        conns = {n: Conn(n) for n in "abcd"}
        for n in arrivals:
            if n == arrivals[-1]:
                for d in done:
                    pending.done(conns[d])
            pending.wait(conns[n])
        assert [n for n, c in conns.items() if c.expired] == evicted
        assert closed == ["evicted"] * len(evicted)
        assert len(pending) <= limit

    run(go())


def test_a_connection_is_closed_when_it_waited_past_the_timeout_and_not_once_it_is_done() -> None:
    async def go() -> None:
        closed: list[Why] = []
        pending = Pending(10, 0.05, closed.append)
        slow, quick = Conn("slow"), Conn("quick")
        pending.wait(slow)
        pending.wait(quick)
        pending.done(quick)
        await asyncio.sleep(0.2)
        assert (slow.expired, quick.expired) == (1, 0)
        assert closed == ["timeout"]
        assert len(pending) == 0

    run(go())
