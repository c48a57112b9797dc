"""escher_harness.bench.extender_summary: bench extender's figures from recorded rows:
spread over repetitions, ratios within a repetition, the extender's share of the cycle, and
the regression guard."""

from __future__ import annotations

from typing import Any

import pytest

from escher_harness.bench import extender_summary as es
from escher_harness.bench.stats import spread


def row(rep: int, mode: str, pps: float, outside: float = 0.1, workload: str = "plain",
        cpu: float = 1.0) -> dict[str, Any]:  # fmt: skip
    return {
        "rep": rep,
        "mode": mode,
        "workload": workload,
        "nodes": 1000,
        "pods_per_s": pps,
        "cpu_ms_per_pod": {"kube-scheduler": 2.0, **({"extender": cpu} if mode != "none" else {})},
        "scheduler": {"algorithm_ms_per_pod": 1.0, "outside_framework_ms_per_pod": outside},
        "extender": None,
        "apiserver_binding_ms": {"p50": 3.0},
        "over_capacity": [],
    }


ROWS = [
    row(0, "none", 200), row(0, "pure", 190), row(0, "extender", 100, outside=2.1),
    row(1, "none", 100), row(1, "pure", 100), row(1, "extender", 80, outside=1.1),
    row(2, "none", 150), row(2, "pure", 120), row(2, "extender", 90, outside=3.1),
]  # fmt: skip


def test_spread_is_median_min_and_max() -> None:
    assert spread([3, 1, 2]) == {"n": 3, "median": 2, "min": 1, "max": 3}
    assert spread([4, 1]) == {"n": 2, "median": 2.5, "min": 1, "max": 4}
    with pytest.raises(ValueError):
        spread([])


def test_ratios_are_taken_within_each_repetition() -> None:
    (s,) = es.summarize(ROWS)
    # Per repetition 0.5, 0.8, 0.6: the median of ratios, not the ratio of medians (90/150).
    assert s["ratios"]["extender/none"] == {"n": 3, "median": 0.6, "min": 0.5, "max": 0.8}
    assert s["ratios"]["pure/none"]["median"] == pytest.approx(0.95)
    assert s["modes"]["extender"]["pods_per_s"] == {"n": 3, "median": 90, "min": 80, "max": 100}


def test_the_extender_share_of_the_cycle_is_its_extra_time_over_the_cycle() -> None:
    # Repetition 0: 2 ms more than alone, of a 10 ms cycle (100 pods/s).
    assert es.extender_share(ROWS[2], ROWS[0]) == pytest.approx(0.2)
    (s,) = es.summarize(ROWS)
    # 0.2, 0.08 (1 ms of 12.5), 0.2727 (3 ms of 11.1)
    assert s["modes"]["extender"]["extender_share_of_cycle"]["median"] == pytest.approx(0.2)
    assert s["modes"]["none"]["extender_share_of_cycle"] is None


def test_the_split_mode_gets_its_own_ratio_and_share() -> None:
    split = [row(0, "extender-split", 190, outside=0.1), row(1, "extender-split", 95)]
    (s,) = es.summarize(ROWS + split)
    assert s["ratios"]["extender-split/none"]["median"] == pytest.approx(0.95)
    # 0 extra ms outside the framework in repetition 0 (0.1 against 0.1 alone): share 0.
    assert s["modes"]["extender-split"]["extender_share_of_cycle"]["min"] == 0
    # The guard watches it beside the extender mode.
    lines = es.guard([s], None)
    assert [line.split(" (")[0] for line in lines] == [
        "guard: 1000 nodes: throughput extender/none 0.60 [0.50-0.80]",
        "guard: 1000 nodes: throughput extender-split/none 0.95 [0.95-0.95]",
    ]


def test_gang_members_compare_the_extender_modes_with_kube_scheduler_alone() -> None:
    gang = [
        row(0, "none", 200, workload="gang"), row(0, "extender-split", 300, workload="gang"),
        row(1, "none", 100, workload="gang"), row(1, "extender-split", 250, workload="gang"),
    ]  # fmt: skip
    (s,) = es.summarize(gang)
    assert s["workload"] == "gang"
    assert s["ratios"] == {"extender-split/none": {"n": 2, "median": 2.0, "min": 1.5, "max": 2.5}}


def test_ephemeral_pods_compare_the_extender_with_pure_only() -> None:
    rows = [row(0, "pure", 50, workload="ephemeral"), row(0, "extender", 40, workload="ephemeral")]
    (s,) = es.summarize(rows)
    assert set(s["ratios"]) == {"extender/pure"}
    assert s["ratios"]["extender/pure"]["median"] == pytest.approx(0.8)
    # No run of kube-scheduler alone to compare with.
    assert s["modes"]["extender"]["extender_share_of_cycle"] is None


@pytest.mark.parametrize(
    ("old_pps", "old_cpu", "flagged"),
    [(90, 1.0, []), (150, 1.0, ["ratio was 1.00"]), (90, 0.5, ["CPU was 0.50"])],
    ids=["same", "ratio-regressed", "cpu-regressed"],
)
def test_the_guard_prints_ratio_and_cpu_and_flags_regressions(
    old_pps: float, old_cpu: float, flagged: list[str]
) -> None:
    now = es.summarize(ROWS)
    old_rows = [
        row(r, m, 150 if m == "none" else old_pps, cpu=old_cpu)
        for r in range(3)
        for m in ("none", "extender")
    ]
    (line,) = es.guard(now, es.summarize(old_rows))
    assert "1000 nodes: throughput extender/none 0.60 [0.50-0.80]" in line
    assert "extender CPU 1.00 [1.00-1.00] ms per pod" in line
    assert [part for part in flagged if part not in line] == []
    assert ("REGRESSION" in line) == bool(flagged)


def test_the_tables_show_every_mode_with_its_spread() -> None:
    text = es.throughput_tables(es.summarize(ROWS))
    # Rows recorded before API writes were counted show none ("-", no writes ratio).
    assert "| 1000 | plain | extender | 90.0 [80.0-100.0] | 0.60 [0.50-0.80] | - |  | 0 |" in text
    assert "| 1000 | plain | none | 150.0 [100.0-200.0] |  | - |  | 0 |" in text
