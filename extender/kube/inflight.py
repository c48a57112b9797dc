"""InFlight: writes sent on the event loop without waiting for them, bounded and cancellable.

What the waker and the lifter share: a write goes out as a task only while this replica may
write and fewer than `limit` are in flight (else it is not sent: the caller counts it, and
its own retry covers it); `aclose()` cancels what is left on stop. Used by
extender.scheduling.kube.waker and extender.gang.kube.lifter.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any


class InFlight:
    def __init__(self, may_write: Callable[[], bool], limit: int) -> None:
        self._may_write = may_write
        self._limit = limit
        self._tasks: set[asyncio.Task[None]] = set()

    def send(self, write: Callable[[], Coroutine[Any, Any, None]]) -> bool:
        """Start `write()` unless this replica may not write or too many are in flight."""
        if not self._may_write() or len(self._tasks) >= self._limit:
            return False
        task = asyncio.get_running_loop().create_task(write())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
