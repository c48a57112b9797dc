"""The gang benchmark's figures, computed from a recorded event trace by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from escher_harness.bench.trace import Event, Kind, dump, figures, load

S, B, U, R, T = Kind.SUBMIT, Kind.BOUND, Kind.UNBOUND, Kind.ROLLBACK, Kind.TIMEOUT

# Gang a (size 2) completes at t=3. Gang b (size 3) gets 2 members bound at t=2 and t=4,
# is rolled back at t=6 (both unbound), resubmitted, completes at t=9. Gang c (size 2)
# binds one member at t=5 and times out at t=10, its member deleted at t=11.
TRACE = [
    Event(0.0, S, "a", size=2),
    Event(1.0, S, "b", size=3),
    Event(1.0, B, "a", "a0"),  # a partial from 1 to 3 with 1 pod: 2 pod-seconds
    Event(2.0, B, "b", "b0"),  # b partial from 2 to 6: 1 pod * 2s + 2 pods * 2s = 6
    Event(3.0, B, "a", "a1"),
    Event(4.0, B, "b", "b1"),
    Event(4.5, S, "c", size=2),
    Event(5.0, B, "c", "c0"),  # c partial from 5 to 11: 6 pod-seconds
    Event(6.0, R, "b"),
    Event(6.0, U, "b", "b0"),
    Event(6.0, U, "b", "b1"),
    Event(7.0, B, "b", "b2"),  # b partial again 7 to 9: 2 + 2 = ... see below
    Event(8.0, B, "b", "b3"),
    Event(9.0, B, "b", "b4"),
    Event(10.0, T, "c"),
    Event(11.0, U, "c", "c0"),
    Event(12.0, U, "a", "a0"),  # teardown of a completed gang is not partial
]


def test_figures_from_a_recorded_trace(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(dump(reversed(TRACE)))  # order on disk does not matter
    f = figures(load(path))
    assert f.gangs_submitted == 3
    assert f.gangs_completed == 2
    assert f.latencies_ms == [3000.0, 8000.0]  # a: 0 -> 3, b: 1 -> 9
    assert f.latency_ms["p50"] == 3000.0 and f.latency_ms["p99"] == 8000.0
    assert f.rollbacks == 1 and f.timeouts == 1
    # partial stretches: a [1,3), b [2,6) and [7,9), c [5,11): at most b and c at once,
    # or a and b at once; never three.
    assert f.max_partial_gangs == 2
    # a: 1*2 = 2; b: 1*2 + 2*2 = 6, then 1*1 + 2*1 = 3; c: 1*6 = 6
    assert f.partial_pod_seconds == pytest.approx(2 + 6 + 3 + 6)
    assert f.partial_series[0] == (0.0, 0)
    assert f.partial_series[-1][1] == 0


def test_empty_trace() -> None:
    f = figures([])
    assert (f.gangs_submitted, f.gangs_completed, f.max_partial_gangs) == (0, 0, 0)
    assert f.latency_ms == {}


def test_creation_counts_each_gangs_first_attempt() -> None:
    """submit -> first CREATED, per gang that has one; a later attempt's CREATED is not it."""
    c = Kind.CREATED
    f = figures(
        [
            Event(0.0, S, "a", size=1),
            Event(0.5, c, "a"),
            Event(1.0, B, "a", "a0"),
            Event(1.0, S, "b", size=1),
            Event(3.0, c, "b"),
            Event(4.0, R, "b"),
            Event(6.0, c, "b"),  # the retry's creation
            Event(7.0, B, "b", "b1"),
            Event(8.0, S, "d", size=1),  # never created: no figure of its own
        ]
    )
    assert f.creation_ms["n"] == 2
    assert (f.creation_ms["p50"], f.creation_ms["max"]) == (500.0, 2000.0)
    assert figures(TRACE).creation_ms == {}  # a log without CREATED (before it existed)


def test_creation_heard_after_completion_ends_at_completion() -> None:
    """The create call's reply came after the watch saw the member bound: creation is capped."""
    c = Kind.CREATED
    f = figures(
        [
            Event(0.0, S, "a", size=1),
            Event(0.2, B, "a", "a0"),
            Event(0.25, c, "a"),
        ]
    )
    assert (f.creation_ms["max"], f.latency_ms["max"]) == (200.0, 200.0)
