"""Loops a Kubernetes side runs together for ever: a feature's watches and reconcilers.

Called by the kube parts' `run` (extender.gang.kube.podgroups, extender.policies.kube.
objectstore). Each loop is a named task; the first error ends them all, and so does a
cancellation of the caller: the others are cancelled and waited for, so none outlives it.
Not asyncio.TaskGroup, which would raise an ExceptionGroup where callers expect the error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from typing import Any


async def run_together(loops: Iterable[tuple[Coroutine[Any, Any, Any], str]]) -> None:
    """Run each (coroutine, task name) until all end or one raises; cancel the rest on the
    way out and wait for them."""
    tasks = [asyncio.create_task(c, name=n) for c, n in loops]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
