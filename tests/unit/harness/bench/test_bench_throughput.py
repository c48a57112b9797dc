"""escher_harness.bench.throughput's pure parts: the bind window's rate, and which
workloads each mode runs; escher_harness.bench.profile's reading of py-spy's output."""

from __future__ import annotations

import math

import pytest

from escher_harness.bench import profile, throughput


@pytest.mark.parametrize(
    ("times", "expected"),
    [
        ([float(i) for i in range(11)], 1.0),  # one a second, edges dropped
        ([0.0] + [10 + i / 10 for i in range(9)] + [100.0], 10.0),  # a slow start and tail
        ([1.0, 1.0, 1.0], math.inf),  # all at once
    ],
    ids=["steady", "slow-edges", "instant"],
)
def test_the_rate_is_read_between_the_10th_and_90th_percentile_binds(
    times: list[float], expected: float
) -> None:
    assert throughput.window_rate(times) == pytest.approx(expected)


def test_a_rate_needs_two_binds() -> None:
    with pytest.raises(ValueError):
        throughput.window_rate([1.0])


def test_only_modes_with_the_policy_api_run_ephemeral_and_prefer_pods() -> None:
    assert throughput.kinds("none") == ("plain", "gang")
    assert throughput.kinds("none-markers") == ("plain",)
    assert throughput.kinds("extender") == ("plain", "ephemeral", "prefer", "gang")
    assert throughput.kinds("extender-split-http") == ("plain", "ephemeral", "prefer", "gang")
    # Gangs are honoured by the extender only; mode none is their baseline.
    assert throughput.kinds("pure") == throughput.kinds("dra") == ("plain", "ephemeral", "prefer")
    assert "none-markers" not in throughput.WAKE_MODES


def test_gang_pods_form_gangs_of_consecutive_pods_the_last_of_what_is_left() -> None:
    keys = throughput.KEYS
    pods = [throughput._pod(i, "gang", None, 20) for i in range(20)]
    gangs = [(p["metadata"]["labels"][keys.gang], p["metadata"]["annotations"][keys.gang_min])
             for p in pods]  # fmt: skip
    assert gangs == [("g0", "8")] * 8 + [("g1", "8")] * 8 + [("g2", "4")] * 4
    # Listed by name, as kube-scheduler queues them, the pods keep their gangs together.
    names = [p["metadata"]["name"] for p in pods]
    assert names[:2] == ["gang-00000", "gang-00001"] and sorted(names) == names
    assert all(p["metadata"]["labels"][throughput.LABEL] == "gang" for p in pods)
    plain = throughput._pod(3, "plain", None, 20)
    assert keys.gang not in plain["metadata"]["labels"] and not plain["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("mode", "cluster"),
    [
        ("none", "none"),
        ("none-markers", "none"),  # kube-scheduler alone, the markers on its nodes
        ("pure", "pure"),
        ("extender-split-http", "extender"),
        ("dra", "dra"),
    ],
)
def test_each_bench_mode_runs_on_a_cluster_mode(mode: throughput.Mode, cluster: str) -> None:
    assert throughput._cluster_mode(mode) == cluster


def test_top_frames_rank_self_samples_and_count_each_frame_once_per_stack() -> None:
    collapsed = "\n".join(
        [
            "main (a.py:1);loop (a.py:2);filter (v.py:3) 6",
            "main (a.py:1);loop (a.py:2);bind (v.py:9);post (h.py:1) 3",
            "main (a.py:1);rec (a.py:5);rec (a.py:5) 1",
            "garbage line",
        ]
    )
    frames = profile.top_frames(collapsed, n=2)
    assert [f.frame for f in frames] == ["filter (v.py:3)", "post (h.py:1)"]
    assert frames[0].self_share == pytest.approx(0.6)
    assert frames[1].total_share == pytest.approx(0.3)
    (rec,) = [f for f in profile.top_frames(collapsed) if f.frame == "rec (a.py:5)"]
    assert rec.total_share == pytest.approx(0.1)  # recursion is not counted twice


def test_the_measurement_waits_for_the_extenders_writes_to_the_nodes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In extender mode the markers go to every node once at start: not in a measured
    window. The wait reads the extender's escher_writeback_pending_nodes until it is 0."""
    scrapes = iter(
        [
            "# HELP x\nescher_writeback_pending_nodes 4200.0\n",
            "escher_writeback_pending_nodes 12.0\n",
            "escher_writeback_pending_nodes 0.0\n",
        ]
    )
    seen: list[str] = []

    def scrape(_info: object) -> str:
        seen.append(text := next(scrapes))
        return text

    monkeypatch.setattr(throughput, "_extender_metrics", scrape)
    monkeypatch.setattr(throughput.time, "sleep", lambda _s: None)
    throughput.writeback_idle(object(), timeout=60)  # type: ignore[arg-type]
    assert len(seen) == 3
