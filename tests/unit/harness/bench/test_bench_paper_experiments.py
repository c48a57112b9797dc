"""bench paper's E1/E2, E3 and E6 logic with no cluster: the WordCount run-time model and its
fit to the paper's rows, each job's and gang run's figures, the shares of a phase, the
verdicts of Fig. 5a/5b, 5c and 7, and their tables."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import pytest

from escher_harness.bench import replay
from escher_harness.bench.approaches import Env, GangJob
from escher_harness.bench.approaches.pure import Pure
from escher_harness.bench.paper import (
    e1_locality,
    e3_fairshare,
    e6_gangs,
    fig5,
    fig5c,
    fig7,
    runner,
)
from escher_harness.bench.paper.e6_designs import DESIGNS, policy_loc
from escher_harness.bench.paper.podwatch import Succeeded
from escher_harness.bench.scenario import GangArrival
from escher_harness.bench.trace import Kind
from escher_harness.workload import Progress

MODEL = e1_locality.MODEL


@pytest.mark.parametrize(
    ("row", "gb", "paper", "within"),
    [  # the model against the paper's own 100-node rows it was fitted to (chunk = GB / 100)
        ("native", 50, 35.1, 0.10),
        ("native", 500, 89.4, 0.02),
        ("random", 500, 219.6, 0.02),
        ("random", 250, 124.7, 0.05),
    ],
)
def test_the_model_is_fitted_to_the_papers_rows(
    row: str, gb: int, paper: float, within: float
) -> None:
    modelled = MODEL.paper_seconds(gb / 100, local=row == "native")
    assert abs(modelled / paper - 1) <= within


def test_a_task_off_its_chunks_node_pays_the_fetch_and_kwok_runs_it_scaled() -> None:
    assert MODEL.paper_seconds(5, False) - MODEL.paper_seconds(5, True) == pytest.approx(5 * 25.9)
    assert MODEL.kwok_seconds(5, True) == pytest.approx(MODEL.paper_seconds(5, True) / 10)


def test_e1_and_e2_points_keep_the_papers_chunks() -> None:
    assert e1_locality.e1_points(20, (50, 500)) == {"50": (20, 0.5), "500": (20, 5.0)}
    assert e1_locality.e2_points((10, 50)) == {"10": (10, 5.0), "50": (50, 1.0)}


def _watch(bound: dict[str, tuple[float, str]], done: dict[str, float]) -> Succeeded:
    w = Succeeded.__new__(Succeeded)
    w.progress = {
        n: Progress(bound=t, phases={"Succeeded": done[n]} if n in done else {})
        for n, (t, _) in bound.items()
    }
    w.nodes = {n: node for n, (_, node) in bound.items()}
    return w


def test_job_figures_measure_placement_and_scale_the_makespan() -> None:
    chunk = {"t0": "n0", "t1": "n1", "t2": "n2", "t3": "n3"}
    w = _watch(
        {"t0": (1.0, "n0"), "t1": (1.5, "n1"), "t2": (2.0, "n0"), "t3": (2.5, "n3")},
        {"t0": 4.0, "t1": 5.0, "t2": 9.0, "t3": 6.0},
    )
    f = e1_locality.figures(w, chunk, 0.5, 0.5)
    assert (f["local_share"], f["makespan_s"], f["model_makespan_s"]) == (0.75, 8.5, 85.0)
    assert f["last_bound_s"] == 2.0
    unfinished = e1_locality.figures(_watch({"t0": (1.0, "n0")}, {}), chunk, 0.5, 0.5)
    assert unfinished["makespan_s"] is None and unfinished["model_makespan_s"] is None


def _job(makespan: float, local: float = 1.0) -> dict[str, Any]:
    return {"model_makespan_s": makespan, "local_share": local}


def _e1(row: str, rep: int, by_x: dict[str, dict[str, Any]]) -> dict[str, Any]:
    mode = "extender" if row == "extender" else "pure"
    return {"approach": mode, "rep": rep, "E1": {row: by_x}}


E1_RUNS = [
    _e1("native", 1, {"50": _job(40.0), "500": _job(90.0)}),
    _e1("native", 2, {"50": _job(42.0), "500": _job(92.0)}),
    _e1("pure", 1, {"50": _job(40.5), "500": _job(91.0)}),
    _e1("pure", 2, {"50": _job(41.0), "500": _job(92.0)}),
    _e1("extender", 1, {"50": _job(50.0), "500": _job(92.0, local=0.95)}),
    _e1("random", 1, {"50": _job(60.0, 0.1), "500": _job(230.0, 0.0)}),
    {"approach": "pure", "rep": 3, "error": "no cluster"},
]


def test_fig5_verdicts_compare_escher_with_node_affinity_at_each_input() -> None:
    res = fig5.results(E1_RUNS, "E1")
    assert sorted(res) == ["extender", "native", "pure", "random"]
    out = {v.claim: v.outcome for v in fig5.verdicts("E1", res)}
    # pure: 40.75 / 41 and 91.5 / 91: within 2%; extender 50 / 41: 22% over
    assert (
        out["E1 pure at 50: makespan within 2% of Kubernetes' node affinity (pure/native)"]
        == "holds"
    )
    assert (
        out["E1 pure at 500: makespan within 2% of Kubernetes' node affinity (pure/native)"]
        == "holds"
    )
    assert (
        out["E1 extender at 50: makespan within 2% of Kubernetes' node affinity (extender/native)"]
        == "does not hold"
    )
    # one extender task of 20 off its chunk's node
    assert out["E1 extender: every task on its chunk's node (share of tasks elsewhere)"] == (
        "does not hold"
    )
    assert out["E1 pure: every task on its chunk's node (share of tasks elsewhere)"] == "holds"
    # random 230 / 91 = 2.53x slower at 500
    assert out["E1 random at least 2.3x slower than Kubernetes at 500 (native/random)"] == "holds"


def test_fig5_table_puts_the_papers_rows_beside_ours() -> None:
    rows = fig5.table(fig5.results(E1_RUNS, "E1"), e1_locality.PAPER_E1, "input").splitlines()
    assert (
        rows[0]
        == "| input | paper random / Kubernetes / ESCHER | random | native | pure | extender |"
    )
    assert rows[2].startswith("| 50 | 51.9 / 35.1 / 35.8 | 60 [60-60] (10% local) | 41 [40-42]")
    assert rows[3] == ("| 100 | 71.6 / 46.3 / 47.2 | - | - | - | - |")


def test_e3_shares_are_each_phases_steady_mean() -> None:
    setup = e3_fairshare.Setup(phase_s=10.0, settle_s=4.0, slots=10)
    samples = [
        {"t": 1.0, "a": 2, "b": 0, "c": 0},  # settling: left out
        {"t": 5.0, "a": 10, "b": 0, "c": 0},
        {"t": 15.0, "a": 4, "b": 6, "c": 0},
        {"t": 16.0, "a": 5, "b": 5, "c": 0},
        {"t": 25.0, "a": 2, "b": 3, "c": 5},
    ]
    assert e3_fairshare.shares(samples, setup) == [
        {"a": 1.0, "b": 0.0, "c": 0.0},
        {"a": 0.45, "b": 0.55, "c": 0.0},
        {"a": 0.2, "b": 0.3, "c": 0.5},
    ]
    assert e3_fairshare.shares([], setup)[0] == {"a": None, "b": None, "c": None}


def test_the_weights_shares_follow_max_min_over_the_hierarchy() -> None:
    for phase in e3_fairshare.EXPECTED:
        assert sum(phase.values()) == pytest.approx(1.0)
    both = e3_fairshare.EXPECTED[1]
    assert both["a"] / both["b"] == pytest.approx(2 / 3)
    assert e3_fairshare.EXPECTED[2]["c"] == 0.5


@pytest.mark.parametrize(
    ("b_in_phase_2", "outcome"),
    [(0.6, "holds"), (0.62, "holds"), (0.64, "does not hold")],
)
def test_fig5c_judges_the_largest_miss_against_3_points(b_in_phase_2: float, outcome: str) -> None:
    shares = [dict(p) for p in e3_fairshare.EXPECTED]
    shares[1] = {"a": 1 - b_in_phase_2, "b": b_in_phase_2, "c": 0.0}
    res = fig5c.results([{"approach": "pure", "rep": 1, "E3": {"shares": shares, "samples": []}}])
    (v,) = fig5c.verdicts(res)
    assert v.outcome == outcome


def _gangs(design: str, rep: int, p50: float, latencies: list[float]) -> dict[str, Any]:
    return {
        "approach": design,
        "rep": rep,
        "E6": {
            "p50_ms": p50,
            "p90_ms": max(latencies),
            "after_created_p50_ms": p50 / 2,
            "latencies_ms": latencies,
            "completed": len(latencies),
            "gangs": len(latencies),
            "rollbacks": 0,
        },
    }


@pytest.mark.parametrize(
    ("framespace", "outcomes"),
    [
        (30.0, ["holds", "holds", "holds"]),  # a tenth of 367 ms, and 2x faster than both
        (100.0, ["does not hold", "holds", "holds"]),
        (380.0, ["does not hold", "holds within 9%", "does not hold"]),  # 380/700, 380/400
    ],
)
def test_fig7_judges_the_framespace_p50_and_its_speed_up(
    framespace: float, outcomes: list[str]
) -> None:
    runs = [
        _gangs("appspace", 1, 900.0, [800.0, 900.0]),
        _gangs("appspace", 2, 500.0, [500.0]),  # median of the repetitions' p50s: 700
        _gangs("libspace", 1, 400.0, [400.0]),
        _gangs("framespace", 1, framespace, [framespace]),
        {"approach": "native", "rep": 1, "error": "no cluster"},
    ]
    res = fig7.results(runs)
    assert sorted(res) == ["appspace", "framespace", "libspace"]
    assert [v.outcome for v in fig7.verdicts(res)] == outcomes


def test_fig7_table_lists_every_design_with_the_papers_numbers() -> None:
    res = fig7.results([_gangs("framespace", 1, 30.0, [20.0, 30.0])])
    rows = fig7.table(res).splitlines()
    assert len(rows) == 2 + len(DESIGNS)
    framespace = next(r for r in rows if r.startswith("| framespace"))
    assert "| 367 / 408 | 30 [30-30] | 30 [30-30] | 15 [15-15] | 2 / 2 | 0 |" in framespace
    assert framespace.endswith(f"| 1624 / {policy_loc('framespace')} |")
    assert next(r for r in rows if r.startswith("| native")).count("| - ") >= 5


def test_libspace_counts_appspaces_lines_and_its_own() -> None:
    app, lib = policy_loc("appspace"), policy_loc("libspace")
    assert app is not None and lib is not None and 0 < lib - app < 30


def test_gang_run_figures_split_latency_at_the_last_member_created() -> None:
    marks = e6_gangs._Marks()
    marks.submitted = {"g1": 100.0, "g2": 100.0, "g3": 100.0}
    marks.created = {"g1": 100.1, "g2": 100.3}
    outcomes = [
        replay.Outcome("g1", True, 150.0),
        replay.Outcome("g2", True, 500.0),
        replay.Outcome("g3", False, 30_000.0),
    ]
    f = e6_gangs.figures(outcomes, marks, gangs=4, overcommits=0)
    assert (f["completed"], f["given_up"], f["unfinished"]) == (2, 1, 1)
    assert (f["p50_ms"], f["p90_ms"], f["latencies_ms"]) == (150.0, 500.0, [150.0, 500.0])
    assert f["after_created_p50_ms"] == 50.0


def test_e2_judges_random_slower_at_every_size_not_by_e1s_factor() -> None:
    runs = [
        {"approach": "pure", "rep": 1, "E2": {"native": {"10": _job(90.0), "20": _job(70.0)}}},
        {"approach": "pure", "rep": 1, "E2": {"random": {"10": _job(240.0), "20": _job(60.0)}}},
    ]
    out = {v.claim: v.outcome for v in fig5.verdicts("E2", fig5.results(runs, "E2"))}
    assert out["E2 random slower than Kubernetes at 10 (native/random)"] == "holds"
    assert out["E2 random slower than Kubernetes at 20 (native/random)"] == "does not hold"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"experiments": ("E4",)}, "unknown experiment 'E4'"),
        ({"e6_designs": ("myspace",)}, "unknown E6 design 'myspace'"),
        ({"modes": ("kueue",)}, "unknown mode 'kueue'"),
    ],
)
def test_the_runner_refuses_what_it_does_not_know(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        runner.check(dataclasses.replace(runner.quick(), **change))


def test_e1_and_e2_share_one_cluster_as_large_as_their_largest_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[int, list[str]]] = []
    monkeypatch.setattr(
        e1_locality, "run", lambda mode, nodes, jobs, seed, rep: calls.append((nodes, list(jobs)))
    )
    cfg = dataclasses.replace(runner.quick(), e1_nodes=20, e2_sizes=(10, 40))
    runner._e1(cfg, "pure", 1, ("E1", "E2"))
    runner._e1(cfg, "pure", 1, ("E1",))
    assert calls == [(40, ["E1", "E2"]), (20, ["E1"])]


def test_a_gangs_life_runs_an_approach_object_not_in_the_registry() -> None:
    calls: list[str] = []

    class Mine(Pure):
        def submit(self, env: Any, job: Any) -> bool:
            calls.append("submit")
            return False

        def delete(self, env: Any, job: Any) -> None:
            calls.append("delete")

    events: list[Kind] = []
    arrival = GangArrival(0.0, "g00001", 2, "1", "1Gi", 1.0)
    out = replay.life(
        Mine("pure"),
        cast(Env, None),
        cast(replay.Waits, None),
        GangJob(arrival, deadline=10, attempt_timeout=5),
        0.0,
        lambda e: events.append(e.kind),
    )
    assert (out.completed, calls, events) == (
        False,
        ["submit", "delete"],
        [Kind.SUBMIT, Kind.TIMEOUT],
    )
