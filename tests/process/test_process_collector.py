"""The garbage collector's startup freeze (extender.collector): what is alive then is out of
every later collection's walk, and still alive and reachable.

In the process tier: the collections that stall the loop are timed in real time."""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator

import pytest

from extender import collector


class Cycle:
    me: object = None


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """No automatic collection until the freeze: one that ran while the test's cycle was
    still referenced would promote it to the old generation, out of the young collection
    the freeze runs (what made this test fail after others had filled the generations)."""
    gc.unfreeze()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()  # the test process's collector as it was


def test_freeze_moves_what_is_alive_out_of_the_collections(
    unfrozen: None, caplog: pytest.LogCaptureFixture
) -> None:
    state = [{"node": i} for i in range(1000)]  # long-lived, tracked
    cycle = Cycle()
    cycle.me = cycle
    gone = weakref.ref(cycle)
    del cycle  # garbage when the freeze comes: collected first, never frozen for good
    caplog.set_level("INFO", logger="extender.collector")
    collector.freeze()
    assert gc.get_freeze_count() >= len(state)
    assert not any(o is state for o in gc.get_objects())  # no generation holds it
    assert state[999] == {"node": 999}
    assert gone() is None
    (record,) = caplog.records
    assert record.getMessage() == "garbage collector: startup state frozen"
    assert record.objects == gc.get_freeze_count()  # type: ignore[attr-defined]


def _sample(metrics: object, name: str, labels: dict[str, str] | None = None) -> float:
    value = metrics.registry.get_sample_value(name, labels)  # type: ignore[attr-defined]
    return 0.0 if value is None else float(value)


@pytest.mark.parametrize("generation", [1, 2])
def test_watch_times_the_collections_that_stall_the_loop(generation: int) -> None:
    from extender.metrics import Metrics

    metrics = Metrics()
    junk = [[i] for i in range(50_000)]  # something to walk
    gc.disable()  # only the collections asked for below
    unwatch = collector.watch(metrics)
    try:
        gc.collect(generation)
        gc.collect(0)  # not timed
    finally:
        unwatch()
        gc.enable()
    del junk
    count = "escher_gc_pause_seconds_count"
    assert _sample(metrics, count, {"generation": str(generation)}) == 1
    assert _sample(metrics, count, {"generation": str(3 - generation)}) == 0
    took = _sample(metrics, "escher_gc_pause_seconds_sum", {"generation": str(generation)})
    assert 0 < took == _sample(metrics, "escher_gc_pause_max_seconds")
    gc.collect(generation)  # unwatched: nothing more counted
    assert _sample(metrics, count, {"generation": str(generation)}) == 1


@pytest.mark.parametrize(("report_after", "logged"), [(0.0, True), (60.0, False)])
def test_a_long_collection_is_logged_with_its_cpu_and_what_it_freed(
    caplog: pytest.LogCaptureFixture, report_after: float, logged: bool
) -> None:
    from extender.metrics import Metrics

    caplog.set_level("WARNING", logger="extender.collector")
    gc.disable()  # only the collection asked for below
    for _ in range(1_000):  # garbage only a collection frees: reference cycles
        cycle: list[object] = []
        cycle.append(cycle)
    del cycle
    unwatch = collector.watch(Metrics(), report_after=report_after)
    try:
        gc.collect(2)
    finally:
        unwatch()
        gc.enable()
    records = [
        r for r in caplog.records if r.getMessage() == "a garbage collection held the thread"
    ]
    assert len(records) == (1 if logged else 0)
    if logged:
        (r,) = records
        assert r.generation == 2 and r.ms > 0 and r.cpu_ms >= 0  # type: ignore[attr-defined]
        assert r.collected >= 1_000 and r.old_objects > 0  # type: ignore[attr-defined]


def test_full_collections_are_deferred_while_busy_one_let_run_every_most_seconds() -> None:
    """While busy, generation 2's threshold is out of reach (the young ones as ever); it is
    restored when the spell ends, when `most` seconds of a spell pass without a full
    collection (until one runs), and when the deferral is cancelled."""
    import asyncio

    from extender.metrics import Metrics

    metrics = Metrics()
    usual = gc.get_threshold()
    busy = [False]

    def deferred() -> bool:
        now = gc.get_threshold()
        on = now[:2] == usual[:2] and now[2] > 1 << 20
        assert _sample(metrics, "escher_gc_deferring") == (1 if on else 0)
        return on

    async def until(want: bool) -> float:
        start = time.monotonic()
        while deferred() != want:
            assert time.monotonic() - start < 10, f"never {'deferred' if want else 'restored'}"
            await asyncio.sleep(0.005)
        return time.monotonic() - start

    async def scenario() -> None:
        task = asyncio.create_task(collector.defer_full(lambda: busy[0], 0.3, metrics, 0.01))
        await asyncio.sleep(0.05)
        assert not deferred()  # quiet
        busy[0] = True
        await until(True)
        busy[0] = False
        await until(False)  # the spell ended
        busy[0] = True
        await until(True)
        assert await until(False) >= 0.25  # still busy, past `most`
        await asyncio.sleep(0.1)
        assert not deferred()  # until a full collection has run
        gc.collect(2)
        await until(True)  # `most` again from there
        busy[0] = False
        await until(False)
        busy[0] = True
        await until(True)  # a new spell
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert not deferred()  # cancelled: restored

    gc.disable()  # no full collection but the one asked for: the thresholds alone are looked at
    try:
        asyncio.run(scenario())
    finally:
        gc.enable()
        gc.set_threshold(*usual)
