"""extender.loopwatch: a callback that holds the event loop shows as lag, the longest kept;
the part the process's own CPU accounts for is kept apart from the time it was not running,
and the watchdog names what held the loop.

In the process tier: the loop is held, and watched, in real time."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from extender.loopwatch import watch
from extender.metrics import Metrics


def burn(seconds: float) -> None:
    """Hold the loop with work (CPU), as a long computation on it would."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def sample(metrics: Metrics, name: str, labels: dict[str, str] | None = None) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    assert value is not None, name
    return value


def test_a_callback_holding_the_loop_is_measured_as_its_lag() -> None:
    metrics = Metrics()

    async def scenario() -> None:
        watcher = asyncio.create_task(watch(metrics, 0.01))
        await asyncio.sleep(0.05)  # a few quiet turns
        quiet = sample(metrics, "escher_event_loop_lag_max_seconds")
        burn(0.12)
        await asyncio.sleep(0.05)
        watcher.cancel()
        assert quiet < 0.1

    asyncio.run(scenario())
    assert sample(metrics, "escher_event_loop_lag_max_seconds") >= 0.1
    assert sample(metrics, "escher_event_loop_held_max_seconds") >= 0.1  # it was work
    count = sample(metrics, "escher_event_loop_lag_seconds_count")
    under = sample(metrics, "escher_event_loop_lag_seconds_bucket", {"le": "0.05"})
    assert count >= 3 and count - under >= 1  # the held turn, in a bucket above 50 ms


def test_what_holds_the_loop_is_named_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    """The watchdog thread logs the loop thread's frames while it is held, so the culprit of
    a lag is named rather than guessed."""
    metrics = Metrics()

    def hold_the_loop() -> None:
        burn(0.3)

    async def scenario() -> None:
        watcher = asyncio.create_task(watch(metrics, 0.02, report_after=0.1))
        await asyncio.sleep(0.05)
        hold_the_loop()
        await asyncio.sleep(0.05)
        watcher.cancel()

    with caplog.at_level(logging.WARNING, logger="extender.loopwatch"):
        asyncio.run(scenario())
    # On a saturated machine it may add that the process was mostly not run: still named.
    held = [r for r in caplog.records if r.getMessage().startswith("the event loop is held")]
    assert len(held) == 1  # once per hold
    assert "hold_the_loop" in held[0].running  # type: ignore[attr-defined]
    assert held[0].held_ms >= 100  # type: ignore[attr-defined]


def test_a_lag_the_process_did_not_work_through_is_not_counted_as_held(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A lag with little CPU used meanwhile (here a blocking call; on a saturated machine,
    the process not being run) is lag, but not the service's work: the held figure stays
    small, and the watchdog says the process mostly was not running."""
    metrics = Metrics()

    async def scenario() -> None:
        watcher = asyncio.create_task(watch(metrics, 0.02, report_after=0.1))
        await asyncio.sleep(0.05)
        time.sleep(0.3)
        await asyncio.sleep(0.05)
        watcher.cancel()

    with caplog.at_level(logging.WARNING, logger="extender.loopwatch"):
        asyncio.run(scenario())
    assert sample(metrics, "escher_event_loop_lag_max_seconds") >= 0.25
    assert sample(metrics, "escher_event_loop_held_max_seconds") < 0.1
    (record,) = [r for r in caplog.records if r.getMessage().startswith("the event loop is")]
    assert "mostly not running" in record.getMessage()
    assert record.cpu_ms < 150  # type: ignore[attr-defined]


def test_a_worker_threads_cpu_is_not_counted_as_the_loops_work() -> None:
    """Work moved off the loop (a gang's plan in a worker thread) uses the process's CPU, but
    it is not the loop's: while the loop only waits, the held figure stays small however busy
    the worker is."""
    metrics = Metrics()

    async def scenario() -> None:
        watcher = asyncio.create_task(watch(metrics, 0.01))
        await asyncio.sleep(0.03)
        worker = asyncio.create_task(asyncio.to_thread(burn, 0.3))
        await asyncio.sleep(0.01)  # the worker starts
        time.sleep(0.15)  # the loop held, not working: the worker computes meanwhile
        await worker
        await asyncio.sleep(0.03)
        watcher.cancel()

    asyncio.run(scenario())
    assert sample(metrics, "escher_event_loop_lag_max_seconds") >= 0.1
    assert sample(metrics, "escher_event_loop_held_max_seconds") < 0.05


@pytest.mark.alone  # the work must end before the deadline: it needs a core to itself
def test_work_done_before_the_timer_was_due_is_not_counted_as_holding_it() -> None:
    """A busy loop is not a late one: 150 ms of work done while the timer still had time,
    then 250 ms in which the thread does not run past the deadline, is a lag of which the
    work accounts for nothing. The watchdog marks the CPU soon after the deadline, so held
    counts at most that margin (half the interval, 100 ms here), not the 150 ms of the whole
    sleep."""
    metrics = Metrics()

    async def scenario() -> None:
        watcher = asyncio.create_task(watch(metrics, 0.2))
        await asyncio.sleep(0.01)  # the watcher sleeps: its deadline is about 190 ms away
        burn(0.15)
        time.sleep(0.25)
        await asyncio.sleep(0.05)
        watcher.cancel()

    asyncio.run(scenario())
    assert sample(metrics, "escher_event_loop_lag_max_seconds") >= 0.15
    assert sample(metrics, "escher_event_loop_held_max_seconds") <= 0.1 + 0.01
