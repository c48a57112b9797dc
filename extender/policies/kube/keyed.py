"""One asyncio lock per key, held only while in use: the reconcilers' serialisation.

A reconcile of an object, the façade's write of it and its teardown never interleave for
the same name; different names run concurrently. A lock exists while someone holds or waits
for it, so the table is bounded by the work in flight, not by the names ever seen. Used by
the reconcilers of this package, on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class KeyedLocks:
    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)
