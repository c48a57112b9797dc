"""The event loop's lag: how late a timer fires, which is how long something held the loop.

Everything the service does runs on one event loop (docs/architecture.md, *Concurrency*):
kube-scheduler's verbs, the policy API's routing, the watches, the write-back, the probes. A
callback that runs long holds all of them, so the loop's lag is the service's first health
figure: a timer is set every `interval` and the time it fired past its deadline observed in
escher_event_loop_lag_seconds, with the longest since start in
escher_event_loop_lag_max_seconds. The lag includes the time the operating system did not
run the process (a saturated node), which holds the loop the same for whoever waits on it.

Which is it? A watchdog thread looks at the loop's last beat every `interval / 2`: when the
loop has been held longer than `report_after` seconds while the thread itself ran on time, it
logs (WARNING, once per hold) what the loop's thread is running, the frames nearest the
callback at the bottom, so the culprit is named; when the thread was late too, the process
was not run, and it says that instead. Started by extender.service, in every mode.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback

from extender.metrics import Metrics

log = logging.getLogger(__name__)

FRAMES = 8  # of the loop thread's stack, innermost last


async def watch(metrics: Metrics, interval: float, report_after: float = 0.1) -> None:
    """Observe the loop's lag every `interval` seconds, for ever; a watchdog thread names
    what holds the loop longer than `report_after`."""
    loop = asyncio.get_running_loop()
    beat = [time.monotonic()]
    stop = threading.Event()
    dog = threading.Thread(
        target=_watchdog,
        args=(beat, threading.get_ident(), interval / 2, report_after, stop),
        name="loop-watchdog",
        daemon=True,
    )
    dog.start()
    longest = 0.0
    try:
        while True:
            deadline = loop.time() + interval
            await asyncio.sleep(interval)
            beat[0] = time.monotonic()
            lag = max(0.0, loop.time() - deadline)
            metrics.loop_lag.observe(lag)
            if lag > longest:
                longest = lag
                metrics.loop_lag_max.set(lag)
    finally:
        stop.set()


def _watchdog(
    beat: list[float], loop_thread: int, every: float, report_after: float, stop: threading.Event
) -> None:
    reported = 0.0  # the beat of the hold last reported: once per hold
    while not stop.wait(every):
        woke = time.monotonic()
        held = woke - beat[0]
        if held < report_after or beat[0] == reported:
            continue
        reported = beat[0]
        late = woke - (beat[0] + report_after)
        if late > report_after:
            # This thread was not run on time either: the process was starved of CPU.
            log.warning(
                "the event loop was held: the process was not run",
                extra={"held_ms": round(held * 1000, 1)},
            )
            continue
        frame = sys._current_frames().get(loop_thread)
        stack = "".join(traceback.format_stack(frame, limit=FRAMES)) if frame else ""
        log.warning(
            "the event loop is held",
            extra={"held_ms": round(held * 1000, 1), "running": stack[-4000:]},
        )
