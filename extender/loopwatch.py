"""The event loop's lag: how late a timer fires, which is how long something held the loop.

Everything the service does runs on one event loop (docs/architecture.md, *Concurrency*):
kube-scheduler's verbs, the policy API's routing, the watches, the write-back, the probes. A
callback that runs long holds all of them, so the loop's lag is the service's first health
figure: a timer is set every `interval` and the time it fired past its deadline observed in
escher_event_loop_lag_seconds, with the longest since start in
escher_event_loop_lag_max_seconds. The lag includes the time the operating system did not
run the process (a saturated node), which holds the loop the same for whoever waits on it.

Which is it? The loop thread's CPU time says: a lag of 300 ms during which the loop's
thread used 20 ms of CPU was at most 20 ms of the service's own work on the loop, the rest
the thread waiting to be run, for the GIL (a worker thread computing: a gang's plan, an
ESL's step) or in a blocking call. The watchdog marks the loop thread's CPU soon after the
timer is due (within `interval / 2`), so the CPU counted is the overdue stretch's, plus that
margin, not the whole sleep's, in which a busy loop works without being late. The longest
lag so bounded is escher_event_loop_held_max_seconds: an upper bound on the longest the
service's own work held the loop, which neither a saturated machine nor work moved off the
loop inflates. A watchdog thread looks at the loop's last beat every `interval / 2`: when
the loop has been held longer than `report_after` seconds it logs (WARNING, once per hold)
what the loop's thread is running, the frames nearest the callback at the bottom, with the
CPU that thread used meanwhile, and says whether it was mostly not run. Started by
extender.service, in every mode.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from typing import Any

from extender.metrics import Metrics

log = logging.getLogger(__name__)

FRAMES = 8  # of the loop thread's stack, innermost last
HELD = "the event loop is held"


async def watch(metrics: Metrics, interval: float, report_after: float = 0.1) -> None:
    """Observe the loop's lag every `interval` seconds, for ever; a watchdog thread names
    what holds the loop longer than `report_after`."""
    loop = asyncio.get_running_loop()
    # The loop thread's own CPU clock, readable from the watchdog's thread too.
    clock = time.pthread_getcpuclockid(threading.get_ident())
    beat = [(time.monotonic(), time.clock_gettime(clock))]
    # The current sleep's deadline (monotonic) and, once the watchdog saw it pass, when it
    # did and the loop thread's CPU then: [deadline, (seen, cpu) | None].
    due: list[Any] = [float("inf"), None]
    stop = threading.Event()
    dog = threading.Thread(
        target=_watchdog,
        args=(beat, due, threading.get_ident(), clock, interval / 2, report_after, stop),
        name="loop-watchdog",
        daemon=True,
    )
    dog.start()
    longest = held_longest = 0.0
    try:
        while True:
            deadline = loop.time() + interval
            cpu = time.clock_gettime(clock)
            due_at = time.monotonic() + interval
            due[:] = [due_at, None]
            await asyncio.sleep(interval)
            cpu_now = time.clock_gettime(clock)
            beat[0] = (time.monotonic(), cpu_now)
            lag = max(0.0, loop.time() - deadline)
            overdue = due[1]
            due[:] = [float("inf"), None]
            work = cpu_now - cpu
            if overdue is not None:  # what the thread used since the mark, and the margin
                seen, cpu_seen = overdue
                work = min(work, cpu_now - cpu_seen + max(0.0, seen - due_at))
            held = min(lag, work)
            metrics.loop_lag.observe(lag)
            if lag > longest:
                longest = lag
                metrics.loop_lag_max.set(lag)
            if held > held_longest:
                held_longest = held
                metrics.loop_held_max.set(held)
    finally:
        stop.set()


def _watchdog(
    beat: list[tuple[float, float]],
    due: list[Any],
    loop_thread: int,
    clock: int,
    every: float,
    report_after: float,
    stop: threading.Event,
) -> None:
    reported = 0.0  # the beat of the hold last reported: once per hold
    while not stop.wait(every):
        deadline, seen = due
        if seen is None and time.monotonic() >= deadline:
            due[1] = (time.monotonic(), time.clock_gettime(clock))
        at, cpu_at = beat[0]
        held = time.monotonic() - at
        if held < report_after or at == reported:
            continue
        reported = at
        cpu = time.clock_gettime(clock) - cpu_at
        frame = sys._current_frames().get(loop_thread)
        stack = "".join(traceback.format_stack(frame, limit=FRAMES)) if frame else ""
        # Less CPU than half the hold: the loop's thread mostly waited, to be run (the
        # machine, the GIL) or in a call.
        busy = cpu >= held / 2
        idle = f"{HELD}, its thread mostly not running (starved, blocked, or the GIL)"
        log.warning(
            HELD if busy else idle,
            extra={
                "held_ms": round(held * 1000, 1),
                "cpu_ms": round(cpu * 1000, 1),
                "running": stack[-4000:],
            },
        )
