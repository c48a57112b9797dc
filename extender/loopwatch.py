"""The event loop's lag: how late a timer fires, which is how long something held the loop.

Everything the service does runs on one event loop (docs/architecture.md, *Concurrency*):
kube-scheduler's verbs, the policy API's routing, the watches, the write-back, the probes. A
callback that runs long holds all of them, so the loop's lag is the service's first health
figure: a timer is set every `interval` and the time it fired past its deadline observed in
escher_event_loop_lag_seconds, with the longest since start in
escher_event_loop_lag_max_seconds (what a benchmark reads after a run). The lag includes the
time the operating system did not run the process (a saturated node), which holds the loop
the same for whoever waits on it. Started by extender.service, in every mode.
"""

from __future__ import annotations

import asyncio

from extender.metrics import Metrics


async def watch(metrics: Metrics, interval: float) -> None:
    """Observe the loop's lag every `interval` seconds, for ever."""
    loop = asyncio.get_running_loop()
    longest = 0.0
    while True:
        deadline = loop.time() + interval
        await asyncio.sleep(interval)
        lag = max(0.0, loop.time() - deadline)
        metrics.loop_lag.observe(lag)
        if lag > longest:
            longest = lag
            metrics.loop_lag_max.set(lag)
