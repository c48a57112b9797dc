"""bench gang-timeline's arithmetic: the extender's log lines read back, one gang's marks
relative to its start, and the medians over gangs and repetitions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from escher_harness.bench.gang_timeline import extender_marks, summarise, table, timeline


def test_the_extenders_gang_bound_lines_give_each_gangs_marks(tmp_path: Path) -> None:
    log = tmp_path / "extender.log"
    lines = [
        {"message": "ready", "nodes": 8},
        {
            "message": "gang bound",
            "gang": "default/g00001",
            "reserved_at": 10.5,
            "filtered_at": 10.55,
            "ready_at": 10.6,
            "bound_at": 10.7,
        },
        # Logged by a version without the filtered mark.
        {
            "message": "gang bound",
            "gang": "default/g00003",
            "reserved_at": 11.5,
            "ready_at": 11.6,
            "bound_at": 11.7,
        },
        # Bound before this process reserved it (learnt after a restart): no timeline.
        {"message": "gang bound", "gang": "default/g00002", "reserved_at": None, "ready_at": None},
    ]
    log.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json at all\n")
    assert extender_marks(log) == {
        "g00001": {"reserved": 10.5, "filtered": 10.55, "ready": 10.6, "bindings": 10.7},
        "g00003": {"reserved": 11.5, "ready": 11.6, "bindings": 11.7},
    }


def test_a_gangs_marks_are_milliseconds_after_its_start_taken_at_the_last_member() -> None:
    seen = {"a": 100.010, "b": 100.030}
    bound = {"a": 100.090, "b": 100.080}
    marks = {"reserved": 100.020, "ready": 100.050, "bindings": 100.070}
    assert timeline(100.0, ["a", "b"], seen, bound, marks) == pytest.approx(
        {"created": 30.0, "reserved": 20.0, "ready": 50.0, "bindings": 70.0, "bound": 90.0}
    )
    assert timeline(100.0, ["a", "b"], seen, bound, None) == pytest.approx(
        {"created": 30.0, "bound": 90.0}
    )


def test_medians_over_gangs_then_spread_over_repetitions() -> None:
    runs = {
        "extender": [
            [{"created": 10, "reserved": 5, "ready": 20, "bindings": 25, "bound": 30}] * 3,
            [{"created": 20, "reserved": 6, "ready": 30, "bindings": 35, "bound": 50}] * 3,
        ],
        "native": [[{"created": 10, "bound": 40}, {"created": 30, "bound": 60}]] * 2,
    }
    s = summarise(runs)
    assert s["extender"]["bound"] == {"n": 2, "median": 40.0, "min": 30.0, "max": 50.0}
    assert s["native"]["bound"]["median"] == 50.0 and "reserved" not in s["native"]
    text = table(s)
    assert "| last member seen bound | 40.0 [30.0-50.0] | 50.0 [50.0-50.0] |" in text
    assert "| gang reserved | 5.5 [5.0-6.0] | - |" in text
