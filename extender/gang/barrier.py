"""The bind barrier: a gang's members wait at bind until enough of them are there.

kube-scheduler binds every pod in its own goroutine, through the extender's bind verb. A
member's bind waits here, on the event loop (no thread is held), until the gang's minimum
is at bind or bound; then every waiting member binds at once. A barrier belongs to one
reservation of one gang: it is opened when the gang is ready, and cancelled (waking every
waiter with the reason) when the reservation is released or the gang ends, so nothing
outlives its gang. Created and driven by the gang manager; awaited by extender.scheduling.verbs.
"""

from __future__ import annotations

import asyncio
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


class Barrier:
    def __init__(self) -> None:
        # Uids of members waiting at bind, each with its calls waiting: kube-scheduler may
        # call again for a member whose earlier call it gave up on (a connection lost) while
        # that one still waits here, and the member is at bind while either does.
        self.waiting: dict[str, int] = {}
        self._event = asyncio.Event()
        self._cancelled = ""

    @property
    def is_open(self) -> bool:
        return self._event.is_set() and not self._cancelled

    def open(self) -> None:
        self._event.set()

    def cancel(self, reason: str) -> None:
        """Wake every waiter with `reason`: the place they were to bind to is gone."""
        self._cancelled = reason
        self._event.set()

    def arrive(self, uid: str) -> None:
        """Member `uid` is at bind: one more call of it to wait."""
        self.waiting[uid] = self.waiting.get(uid, 0) + 1

    async def wait(self, uid: str, timeout: float) -> Woken:
        """Wait (after `arrive`) until the barrier opens, is cancelled, or `timeout` passes."""
        try:
            async with asyncio.timeout(timeout):
                await self._event.wait()
        except TimeoutError:
            return Woken(Wake.TIMED_OUT, f"not enough members reached bind within {timeout:g}s")
        finally:
            self.leave(uid)
        return Woken(Wake.CANCELLED, self._cancelled) if self._cancelled else _OPEN

    def leave(self, uid: str) -> None:
        """One call of member `uid` stopped waiting."""
        left = self.waiting.get(uid, 0) - 1
        if left > 0:
            self.waiting[uid] = left
        else:
            self.waiting.pop(uid, None)
