"""CPython's garbage collector, set for a long-running service whose state is large and
long-lived: applied by extender.server, the process's entry, and nowhere else (tests and
tools that build a Service in their own process keep their collector as it is).

A full (generation 2) collection walks every tracked object alive, and the loop stands still
meanwhile: with the modules of the web stack and a 5,000-node ledger that was tens of
milliseconds, every few seconds under load, the tail of every verb (issue 28). Once the
ledger is built from the cluster, `freeze` collects the young generations (not a full
collection: that alone held the loop 92 ms at 5,000 nodes, to free 4 objects) and moves
everything alive to the permanent generation, which later collections do not walk: the
startup state stays reachable and is freed by reference counting as ever, only no longer
traversed. What is frozen and later becomes garbage in a reference cycle is never
collected; the state alive at startup (modules, the service's parts, the ledger's
containers) is there for the process's life, so that is bounded by the one freeze (as is
the old generation's garbage at startup, frozen with it).

The state that grows after is kept untracked instead: msgspec Structs with gc=False and
tuples of them (the ledger's holdings, a gang's places and members, each pod's PodInfo, each
node's last look and write-back record, the decoded objects they keep). What a full
collection still walks in a large gang's bind burst is mostly the calls held at the barrier
(hypercorn's stream, task and queue for each), which is why the service's own part of a held
call is kept to a few objects (extender.http.edge, extender.http.verbs_listener).

`watch` times the collections that remain (generations 1 and 2) into the service's metrics,
so that a stall of the event loop can be told apart from a collection: escher_gc_pause_seconds
and escher_gc_pause_max_seconds. A collection longer than `report_after` is also logged with
the CPU its thread used meanwhile and the objects it freed: a long one that used little CPU
was the process not being run, and one that used it all freed garbage or walked many objects
(66,000 fresh lists take 2.3 ms in an idle interpreter on a 2-core machine; a bind burst's
66,000, scattered over a loaded machine's memory, took 25-38 ms of CPU). (What the old
generation holds was logged once per process too, until that walk was seen holding the loop
60 ms by itself at 5,000 nodes; what it found is in docs/results/gangs-2026-11-26.md.)
Registered by extender.server for the process's life, and removed by the callable it
returns.

`defer_full` is the last lever: while gang members' bind calls are in flight (a bind burst of
up to 1,024 members, held at the barrier and then queued for the binder's connections, each
call tens of hypercorn's objects), CPython's automatic full collections are deferred, so that
none walks the burst's calls; the young generations are collected as ever, so only garbage
that outlives them waits. The deferral ends when no member's bind is in flight, and the next
young collection then runs the full one, over what is left. In a spell longer than `most`
seconds, CPython's schedule is restored whenever `most` seconds have passed without a full
collection, until one has run: garbage that outlives the young generations is still
collected at least that often. Run by extender.server as a task for the process's life.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from typing import Any

from extender.metrics import Metrics

log = logging.getLogger(__name__)


def freeze() -> None:
    """Collect the young generations, then move every object alive to the permanent
    generation (gc.freeze). Not a full collection first: at 5,000 nodes one walked 125,000
    objects for 72 ms of CPU, holding the loop 92 ms at startup, and freed 4 objects; the
    old generation's garbage, if any, is frozen with the rest (once)."""
    start = time.perf_counter()
    gc.collect(1)
    gc.freeze()
    log.info(
        "garbage collector: startup state frozen",
        extra={
            "objects": gc.get_freeze_count(),
            "ms": round((time.perf_counter() - start) * 1000, 1),
        },
    )


def watch(metrics: Metrics, report_after: float = 0.05) -> Callable[[], None]:
    """Time every generation-1 and -2 collection into `metrics`, and log those longer than
    `report_after` seconds; returns the callable that stops it."""
    # A collection in progress, (wall, thread CPU) at its start: the GIL makes them one at a
    # time, and the thread that triggers one runs it, so its CPU clock is the collection's.
    started: list[tuple[float, float]] = []
    pause = metrics.gc_pause
    by_generation = {g: pause.labels(str(g)) for g in (1, 2)}
    longest = metrics.gc_pause_max
    worst = 0.0

    def timed(phase: str, info: dict[str, Any]) -> None:
        nonlocal worst
        generation = info["generation"]
        if generation == 0:  # every ~700 allocations, short: timing them would cost more
            return
        if phase == "start":
            started.append((time.perf_counter(), time.thread_time()))
        elif started:
            wall, cpu = started.pop()
            took = time.perf_counter() - wall
            by_generation[generation].observe(took)
            if took > worst:
                worst = took
                longest.set(took)
            if took > report_after:
                cpu_ms = round((time.thread_time() - cpu) * 1000, 1)
                extra: dict[str, Any] = {
                    "generation": generation,
                    "ms": round(took * 1000, 1),
                    "cpu_ms": cpu_ms,
                    "collected": info.get("collected", 0),
                    "old_objects": len(gc.get_objects(2)),  # what a full one walks
                }
                log.warning("a garbage collection held the thread", extra=extra)

    gc.callbacks.append(timed)
    return lambda: gc.callbacks.remove(timed)


# A generation-2 threshold no count reaches: CPython runs a full collection when generation 1
# has been collected more than this many times since the last one.
_NEVER = 1 << 30


async def defer_full(
    busy: Callable[[], bool], most: float, metrics: Metrics, tick: float = 0.1
) -> None:
    """Defer automatic full collections while `busy()` (looked at every `tick` seconds), so
    that one runs at most every `most` seconds of a busy spell, for ever; the usual
    thresholds are restored when it is cancelled."""
    usual = gc.get_threshold()
    deferring = metrics.gc_deferring
    spell: float | None = None  # when the busy spell began
    since: float | None = None  # when this deferral began
    last_full = float("-inf")  # when the last full collection ended (any thread's)

    def full(phase: str, info: dict[str, Any]) -> None:
        nonlocal last_full
        if phase == "stop" and info["generation"] == 2:
            last_full = time.monotonic()

    def restore(why: str) -> None:
        nonlocal since
        gc.set_threshold(*usual)
        deferring.set(0)
        if since is not None:
            took = round(time.monotonic() - since, 2)
            log.info("full collections deferred", extra={"seconds": took, "until": why})
        since = None

    gc.callbacks.append(full)
    try:
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            if not busy():
                spell = None
                if since is not None:
                    restore("no member was binding")
                continue
            if spell is None:
                spell = now
            if now - max(spell, last_full) < most:
                if since is None:  # the spell's first look, or a full collection just ran
                    gc.set_threshold(usual[0], usual[1], _NEVER)
                    deferring.set(1)
                    since = now
            elif since is not None:  # one is due: CPython's thresholds say when
                restore(f"{most:g}s had passed")
    finally:
        gc.callbacks.remove(full)
        restore("stopped")
