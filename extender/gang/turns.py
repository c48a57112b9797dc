"""Turns: at most `per_turn` tasks pass a point in one turn of the event loop, the rest in
the turns after, in the order they came.

Why. The event loop runs every callback that is ready at the start of a turn before it looks
at its timers and sockets again, so a turn is as long as what became ready together. A
gang's bind burst makes its work ready in waves: up to `bind_in_flight` (64) Bindings come
back from the API server in one turn, and each member then answers kube-scheduler (the
gang's books, the reply, its HTTP/2 frames), 43-51 answers in one turn holding the loop
14-20 ms of CPU. On a shared machine a turn's CPU becomes two or three times its length in
wall time, and every other call (a filter, a probe) waits for the whole turn. Passing the
answers through here spreads them over turns of `per_turn` each without lowering the
Bindings in flight, which pace the burst.

A turnstile, not a timer: a task passes at once while the turn has room and nobody is queued,
else waits on a future the next turn resolves. Nothing is scheduled while nobody passes, so an
idle loop stays idle. Used by extender.scheduling.verbs before a gang member's bind answers.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Turns:
    def __init__(self, per_turn: int) -> None:
        if per_turn < 1:
            raise ValueError(f"per_turn must be at least 1, not {per_turn}")
        self.per_turn = per_turn
        self._left = per_turn  # passes left in this turn
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._armed = False  # a call to _turn is scheduled for the next turn

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def take(self) -> None:
        """Return in this turn if it has room, else in a later one (first come, first out)."""
        if self._left > 0 and not self._waiters:
            self._left -= 1
            self._arm()
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._arm()
        await waiter  # a cancelled waiter is skipped when its turn comes

    def _arm(self) -> None:
        if not self._armed:
            self._armed = True
            asyncio.get_running_loop().call_soon(self._turn)

    def _turn(self) -> None:
        """A new turn: its room is whole again, and the first waiters take it."""
        self._armed = False
        self._left = self.per_turn
        while self._waiters and self._left > 0:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self._left -= 1
        if self._waiters or self._left < self.per_turn:
            self._arm()  # the room used in this turn comes back in the next
