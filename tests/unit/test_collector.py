"""The garbage collector's startup freeze (extender.collector): what is alive then is out of
every later collection's walk, and still alive and reachable."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import weakref
from collections.abc import Callable, Iterator

import pytest

from extender import collector


class Cycle:
    me: object = None


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    try:
        yield
    finally:
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
        # The first long full collection says what the old generation holds.
        assert sum(r.old_types.values()) <= r.old_objects  # type: ignore[attr-defined]
        assert r.old_types and all(" of " in c for c in r.old_largest)  # type: ignore[attr-defined]


def _full_collections() -> tuple[list[int], Callable[[str, dict[str, object]], None]]:
    """A record of the full collections made, and the callback that records them."""
    made: list[int] = []

    def seen(phase: str, info: dict[str, object]) -> None:
        if phase == "stop" and info["generation"] == 2:
            made.append(1)

    return made, seen


@pytest.mark.parametrize(
    ("busy", "within", "made_while_busy"),
    [
        (False, 60.0, True),  # due and quiet: at the next poll
        (True, 60.0, False),  # due, calls in flight: it waits
        (True, 0.2, True),  # ... at most `within`
    ],
    ids=["quiet", "busy", "busy-too-long"],
)
def test_full_collections_wait_for_a_moment_without_calls_in_flight(
    busy: bool, within: float, made_while_busy: bool
) -> None:
    made, seen = _full_collections()
    flag = [busy]

    async def scenario() -> tuple[bool, bool, tuple[int, int, int]]:
        pacing = asyncio.create_task(
            collector.pace_full_collections(lambda: flag[0], within, poll=0.01)
        )
        await asyncio.sleep(0.02)
        automatic = gc.get_threshold()
        for _ in range(12):  # generation-1 collections: a full one is due
            gc.collect(1)
        assert gc.get_count()[2] >= 10
        await asyncio.sleep(0.5)
        during = bool(made)
        flag[0] = False  # the calls are answered: it is made now
        for _ in range(100):
            if made:
                break
            await asyncio.sleep(0.01)
        pacing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pacing
        return during, bool(made), automatic

    before = gc.get_threshold()
    gc.callbacks.append(seen)
    try:
        during, after, automatic = asyncio.run(scenario())
    finally:
        gc.callbacks.remove(seen)
    assert during is made_while_busy
    assert after
    assert automatic[2] > 1_000_000  # none automatic while paced
    assert gc.get_threshold() == before  # CPython's schedule is back
