"""The gang benchmark's campaign and report, without a cluster: every approach replays the same
trace, approaches interleave with the first rotating, a campaign resumes only on the same
workload (bench.gang_bench); figures over repetitions and issue 12's targets from recorded
runs (bench.gang_report); one run's figures from its event log (bench.trace); the write
counters (bench.apimetrics); and the pod watch's events and waits (bench.recorder)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from escher_harness.bench import (
    environment,
    gang_bench,
    gang_plots,
    gang_report,
    presets,
    scenario,
    trace,
)
from escher_harness.bench.apimetrics import difference, parse_write_counts
from escher_harness.bench.puregang import PLACEHOLDER_LABEL
from escher_harness.bench.recorder import Recorder
from escher_harness.bench.trace import Event, Kind

# --- the campaign ----------------------------------------------------------------------------

WHICH = ("extender", "pure", "native")
REAL_PLOTS = gang_plots.write


def _small() -> presets.Preset:
    return presets.customised(presets.QUICK, repeat=3, duration=5.0)


def _figures_of(approach: str, rep: int, arrivals: list[scenario.GangArrival]) -> dict[str, Any]:
    """A run's figures made up from the approach and the repetition, so the report's cells
    can be checked: p50 = 100 x (approach index + 1) + rep."""
    p50 = 100.0 * (WHICH.index(approach) + 1) + rep
    return {
        "gangs_submitted": len(arrivals),
        "gangs_completed": len(arrivals) - rep,
        "latency_ms": {"p50": p50, "p90": p50, "p99": p50},
        "latencies_ms": [p50],
        "partial_series": [[0.0, 0]],
        "api_writes_per_gang": 30.0 + rep,
    }


@pytest.fixture
def campaign(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """gang_bench.run with each run recorded instead of started on a cluster."""
    calls: list[dict[str, Any]] = []

    def run_one(
        approach: str,
        preset: presets.Preset,
        sc: scenario.Scenario,
        workload: Path,
        arrivals: Any,
        run_dir: Path,
        label: str,
    ) -> dict[str, Any]:
        rep = int(run_dir.parent.parent.name[1:])
        run_dir.mkdir(parents=True)
        calls.append(
            {
                "approach": approach,
                "scenario": sc.name,
                "rep": rep,
                "file_digest": scenario.digest(
                    scenario.from_json(json.loads(workload.read_text()))
                ),
                "digest": scenario.digest(arrivals),
            }
        )
        return _figures_of(approach, rep, list(arrivals))

    monkeypatch.setattr(gang_bench, "run_one", run_one)
    monkeypatch.setattr(gang_bench, "unavailable", lambda approach: None)
    monkeypatch.setattr(environment, "versions", lambda: {"kubernetes": "v1.37.2"})
    # platform.platform() runs `uname -p`: a unit test starts no process.
    machine = {"cores": 2, "platform": "Linux", "load_average_at_start": [0.0, 0.0, 0.0]}
    monkeypatch.setattr(environment, "machine", lambda: machine)
    # Rendering the PNGs is most of a campaign's time here; the one test of the plots
    # puts the real writer back (REAL_PLOTS).
    monkeypatch.setattr(gang_plots, "write", lambda *args: None)
    return calls


def test_every_approach_replays_the_same_trace(
    campaign: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    preset = _small()
    assert gang_bench.run(tmp_path, preset, WHICH) == 0
    assert len(campaign) == 3 * 2 * len(WHICH)
    for sc in preset.scenarios:
        want = scenario.digest(scenario.generate(sc, preset.seed))
        runs = [c for c in campaign if c["scenario"] == sc.name]
        assert {c["digest"] for c in runs} == {c["file_digest"] for c in runs} == {want}
    doc = json.loads((tmp_path / "results.json").read_text())
    for sc in preset.scenarios:
        w = doc["workloads"][sc.name]
        assert w["digest"] == scenario.digest(scenario.generate(sc, preset.seed))
        # gangs submitted are equal across approaches by construction
        subs = {
            a: doc["approaches"][a]["scenarios"][sc.name]["figures"]["gangs"]["median"]
            for a in WHICH
        }
        assert set(subs.values()) == {len(w["arrivals"])}
    printed = capsys.readouterr().out
    assert "repetitions: 3" in printed and doc["workloads"]["contention"]["digest"] in printed


def test_approaches_interleave_and_the_first_rotates(
    campaign: list[dict[str, Any]], tmp_path: Path
) -> None:
    gang_bench.run(tmp_path, _small(), WHICH)
    seen = [(c["rep"], c["scenario"], c["approach"]) for c in campaign]
    firsts = [seen[i][2] for i in range(0, len(seen), len(WHICH))]
    # per repetition and scenario, all approaches once; the first moves on each repetition
    assert firsts == ["extender", "extender", "pure", "pure", "native", "native"]
    assert gang_bench.order(WHICH, 4) == list(WHICH)


def test_the_report_gives_median_min_and_max_over_repetitions(
    campaign: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gang_plots, "write", REAL_PLOTS)
    gang_bench.run(tmp_path, _small(), WHICH)
    doc = json.loads((tmp_path / "results.json").read_text())
    figs = doc["approaches"]["pure"]["scenarios"]["contention"]["figures"]
    # pure's p50 was 201, 202, 203 in repetitions 1-3
    assert figs["p50"] == {"n": 3, "median": 202.0, "min": 201.0, "max": 203.0}
    assert figs["writes_per_gang"] == {"n": 3, "median": 32.0, "min": 31.0, "max": 33.0}
    report = (tmp_path / "report.md").read_text()
    assert "202.0 [201.0-203.0]" in report
    assert "**3 repetition(s)**" in report
    for png in ("latency_cdf.png", "partial_gangs.png", "completions.png"):
        assert (tmp_path / png).stat().st_size > 0
    assert "Every process has the same share of a saturated CPU" in report


def test_the_report_says_the_extender_ran_at_a_larger_share(
    campaign: list[dict[str, Any]], tmp_path: Path
) -> None:
    gang_bench.run(tmp_path, presets.customised(_small(), extender_nice=-5), WHICH)
    report = (tmp_path / "report.md").read_text()
    assert "autogroup nice -5 (--extender-nice): about 3.1x the share" in report
    assert "Every process has the same share" not in report


@pytest.mark.parametrize(
    ("side", "said"),
    [
        (None, "Every process may run on every CPU."),
        ("scheduling", "kube-scheduler and the extender on one half"),
        ("extender", "(--cpu-split extender): the extender and the /healthz probe on one half"),
    ],
)
def test_the_report_says_where_the_processes_ran(
    campaign: list[dict[str, Any]], tmp_path: Path, side: Any, said: str
) -> None:
    gang_bench.run(tmp_path, presets.customised(_small(), cpu_split=side), WHICH)
    assert said in " ".join((tmp_path / "report.md").read_text().split())


@pytest.mark.parametrize(
    ("recorded", "split"),
    [(True, "scheduling"), (False, None), (None, None), ("extender", "extender"), ("x", None)],
)
def test_a_split_recorded_before_the_extenders_own_half_reads_as_the_scheduling_side(
    recorded: object, split: str | None
) -> None:
    assert gang_report._split(recorded) == split


def test_a_topology_campaign_reports_free_whole_domains(
    campaign: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = gang_bench.run_one

    def run_one(*args: Any) -> dict[str, Any]:
        free = {"free_blocks_mean": 0.5, "free_blocks_mean_pct": 50.0}
        return {**recorded(*args), "fragmentation": free, "free_domains_series": [[0.0, 8, 1]]}

    monkeypatch.setattr(gang_bench, "run_one", run_one)
    preset = presets.customised(presets.TOPOLOGY, nodes=256, repeat=1, scenarios=["required"])
    gang_bench.run(tmp_path, preset, WHICH)
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["domains"] == {"rack": 8, "block": 1}
    figs = doc["approaches"]["native"]["scenarios"]["required"]
    assert figs["figures"]["free_blocks_mean"]["median"] == 0.5
    assert "free_domains_series" not in figs["repetitions"]["1"]  # for the plots only
    report = (tmp_path / "report.md").read_text()
    assert "Free whole domains as a % of all the cluster's (blocks: 1, racks: 8)" in report
    assert "free blocks mean" in report and "free racks mean %" in report


def test_a_campaign_resumes_only_on_the_same_workload(
    campaign: list[dict[str, Any]], tmp_path: Path
) -> None:
    gang_bench.run(tmp_path, _small(), WHICH)
    campaign.clear()
    with pytest.raises(RuntimeError, match="--resume"):
        gang_bench.run(tmp_path, _small(), WHICH)
    # One more repetition: only its runs are made.
    more = presets.customised(_small(), repeat=4)
    gang_bench.run(tmp_path, more, WHICH, resume=True)
    assert {c["rep"] for c in campaign} == {4} and len(campaign) == 2 * len(WHICH)
    with pytest.raises(RuntimeError, match="another workload"):
        gang_bench.run(tmp_path, presets.customised(more, seed=2), WHICH, resume=True)


# --- figures over repetitions, and the targets -----------------------------------------------


def _run(p50: float, completed: int, partial: float, writes: float, wasted: int) -> dict[str, Any]:
    return {
        "gangs_submitted": 20,
        "gangs_completed": completed,
        "latency_ms": {"p50": p50},
        "partial_pod_seconds": partial,
        "api_writes_per_gang": writes,
        "wasted_partial_stretches": wasted,
        "max_partial_gangs": 1,
        "longest_partial_ms": 40.0,
    }


def test_aggregate_leaves_out_failed_runs_and_missing_figures() -> None:
    runs = [_run(10, 20, 1, 30, 0), {"error": "cluster did not start"}, _run(30, 18, 2, 32, 0)]
    agg = gang_report.aggregate(runs)
    assert agg["p50"] == {"n": 2, "median": 20.0, "min": 10.0, "max": 30.0}
    assert "p99" not in agg
    assert gang_report.cell(agg["p50"], 1) == "20.0 [10.0-30.0]"
    assert gang_report.cell({"n": 1, "median": 5, "min": 5, "max": 5}, 0) == "5"
    assert gang_report.cell(None, 0) == "-"


def _targets(ext: list[dict[str, Any]], native: list[dict[str, Any]]) -> list[gang_report.Target]:
    cos = [_run(60, 20, 0, 30, 0)] * len(ext)
    runs = {
        sc: {
            "extender": dict(enumerate(ext, 1)),
            "native": dict(enumerate(native, 1)),
            "coscheduling": dict(enumerate(cos, 1)),
        }
        for sc in ("no-contention", "contention")
    }
    return gang_report.targets(runs)


def test_a_target_is_met_only_when_it_holds_in_every_repetition() -> None:
    native = [_run(62, 18, 5.0, 31, 0), _run(58, 17, 4.0, 30, 0)]
    ts = _targets([_run(50, 19, 1.0, 30, 0), _run(55, 17, 2.0, 29, 0)], native)
    assert [t.met for t in ts] == [True] * 5
    assert "extender 52.5 ms vs coscheduling 60, native 60" in ts[0].detail
    ts = _targets([_run(50, 19, 1.0, 30, 0), _run(59, 16, 2.0, 29, 1)], native)
    # Repetition 2 breaks three targets: p50 59 > 58, completed 16 < 17, and a wasted stretch.
    assert [t.met for t in ts] == [False, False, False, True, True]
    assert "held in 1 of 2 repetitions" in ts[0].detail


def test_the_gated_extender_is_judged_on_its_own_when_it_ran() -> None:
    native = [_run(62, 18, 5.0, 31, 0)]
    runs = {
        sc: {
            "extender": {1: _run(50, 19, 1.0, 40, 0)},
            "extender-gated": {1: _run(70, 19, 1.0, 30, 0)},
            "native": {1: native[0]},
            "coscheduling": {1: _run(60, 20, 0, 30, 0)},
        }
        for sc in ("no-contention", "contention")
    }
    ts = gang_report.targets(runs)
    assert [t.met for t in ts] == [True, True, True, True, False, False, True, True, True, True]
    assert ts[5].name.startswith("no contention: extender-gated p50")
    assert "extender-gated 70 ms vs" in ts[5].detail


def test_a_target_without_its_peer_is_not_measured() -> None:
    ts = gang_report.targets({"contention": {"extender": {1: _run(1, 1, 1, 1, 0)}}})
    assert [t.met for t in ts] == [None, None, True, None, None]


# --- one run's figures -----------------------------------------------------------------------

S, B, U, H, R, OK, D, ST = (
    Kind.SUBMIT,
    Kind.BOUND,
    Kind.UNBOUND,
    Kind.HELD,
    Kind.RELEASED,
    Kind.SUCCEEDED,
    Kind.DONE,
    Kind.START,
)


def test_succeeded_placeholders_stretches_and_lag_from_a_log() -> None:
    log = [
        Event(100.0, ST),
        # a: planned at 100, submitted 0.3 s late; two placeholders hold room 1 s, then the
        # members bind one by one and complete; both succeed; done.
        Event(100.3, S, "a", size=2, due=100.0),
        Event(101.0, H, "a", "a-p0"),
        Event(101.0, H, "a", "a-p1"),
        Event(102.0, R, "a", "a-p0"),
        Event(102.0, B, "a", "a-0"),
        Event(102.5, R, "a", "a-p1"),
        Event(102.5, B, "a", "a-1"),
        Event(110.0, OK, "a", "a-0"),
        Event(110.0, OK, "a", "a-1"),
        Event(111.0, D, "a"),
        # b: one member binds, then is deleted at its deadline: a wasted stretch of 4 s.
        Event(103.0, S, "b", size=2, due=103.0),
        Event(104.0, B, "b", "b-0"),
        Event(108.0, U, "b", "b-0"),
    ]
    f = trace.figures(log)
    assert (f.gangs_submitted, f.gangs_completed, f.gangs_succeeded) == (2, 1, 1)
    assert f.latencies_ms == pytest.approx([2200.0])  # 100.3 -> 102.5
    # placeholders: 2 pods for 1 s, then 1 pod for 0.5 s; a's member 0.5 s alone; b's 4 s
    assert f.placeholder_pod_seconds == pytest.approx(2.5)
    assert f.partial_pod_seconds == pytest.approx(2.5 + 0.5 + 4.0)
    assert (f.partial_stretches, f.wasted_partial_stretches) == (2, 1)
    assert f.longest_partial_ms == pytest.approx(4000.0)
    assert f.replay_lag_ms == pytest.approx(300.0)
    assert f.last_done_s == pytest.approx(11.0)
    assert f.max_partial_gangs == 1  # a's stretch [102, 102.5) ends before b's begins


# --- the write counters ----------------------------------------------------------------------

_COUNTER = (
    "apiserver_request_total"
    "{{code={code!r},resource={res!r},subresource={sub!r},verb={verb!r}}} {n}"
)
METRICS = "\n".join(
    _COUNTER.format(code=code, res=res, sub=sub, verb=verb, n=n).replace("'", '"')
    for code, res, sub, verb, n in [
        ("201", "pods", "binding", "POST", 12),
        ("201", "pods", "", "POST", 8),
        ("200", "pods", "", "LIST", 99),
        ("200", "nodes", "status", "PATCH", 5),
        ("409", "nodes", "status", "PATCH", 1),
        ("201", "events", "", "POST", 40),
        ("200", "leases", "", "PUT", 30),
    ]
)


def test_writes_are_counted_per_verb_and_resource_without_events_and_leases() -> None:
    counts = parse_write_counts(METRICS)
    assert counts == {"PATCH nodes/status": 6, "POST pods": 8, "POST pods/binding": 12}
    later = {**counts, "POST pods": 10, "DELETE pods": 3}
    assert difference(later, counts) == {"DELETE pods": 3, "POST pods": 2}


# --- the pod watch ---------------------------------------------------------------------------


def _pod(name: str, node: str | None = None, phase: str = "Pending", **labels: str) -> Any:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase},
    }


def test_the_watch_emits_what_the_cluster_did_for_the_traces_gangs_only() -> None:
    events: list[Event] = []
    now = iter(float(t) for t in range(100))
    r = Recorder(None, {"g00001"}, events.append, clock=lambda: next(now))  # type: ignore[arg-type]
    r.observe(_pod("g00001-0"), deleted=False)
    r.observe(_pod("g00001-0", "n1"), deleted=False)
    r.observe(_pod("g00001-0", "n1"), deleted=False)  # seen again: nothing new
    r.observe(_pod("g00001-0", "n1", "Running"), deleted=False)
    r.observe(_pod("g00001-0", "n1", "Succeeded"), deleted=False)
    r.observe(_pod("ph-x", "n2", **{PLACEHOLDER_LABEL: "g00001"}), deleted=False)
    r.observe(_pod("ph-x", "n2", **{PLACEHOLDER_LABEL: "g00001"}), deleted=True)
    r.observe(_pod("w00000-0", "n1"), deleted=False)  # the warm-up gang: not in the trace
    r.observe(_pod("g00001-0", "n1", "Succeeded"), deleted=True)
    assert [(e.kind, e.gang, e.pod) for e in events] == [
        (Kind.BOUND, "g00001", "g00001-0"),
        (Kind.RUNNING, "g00001", "g00001-0"),
        (Kind.SUCCEEDED, "g00001", "g00001-0"),
        (Kind.HELD, "g00001", "ph-x"),
        (Kind.RELEASED, "g00001", "ph-x"),
        (Kind.UNBOUND, "g00001", "g00001-0"),
    ]
    assert r.nodes(["w00000-0", "nope"]) == {"w00000-0": "n1", "nope": None}
    assert r.pods_of("w00000") == ["w00000-0"]


def test_the_watch_waits_return_at_once_when_met_and_count_when_not() -> None:
    r = Recorder(None, set(), lambda e: None)  # type: ignore[arg-type]
    r.observe(_pod("g1-0", "n1", "Succeeded"), deleted=False)
    r.observe(_pod("g1-1"), deleted=False)
    assert r.bound(["g1-0"], timeout=60) == 1
    assert r.succeeded(["g1-0"], timeout=60) == 1
    assert r.bound(["g1-0", "g1-1"], timeout=0.01) == 1
    assert r.gone(["g1-2"], timeout=60) is True
    assert r.gone(["g1-1"], timeout=0.01) is False


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("escher_event_loop_lag_max_seconds 0.0234\n", {"longest_loop_lag_ms": 23.4}),
        (
            "escher_event_loop_lag_max_seconds 0.3\nescher_event_loop_held_max_seconds 0.012\n",
            {"longest_loop_lag_ms": 300.0, "longest_loop_held_ms": 12.0},
        ),
        (
            'escher_gc_pause_seconds_count{generation="2"} 3\nescher_gc_pause_max_seconds 0.0415\n',
            {"longest_gc_pause_ms": 41.5},
        ),
        ("# HELP x\nescher_event_loop_lag_seconds_count 5\n", {}),  # an extender without it
        ("# not read: connection refused\n", {}),
        (None, {}),  # no metrics file kept
    ],
)
def test_the_extenders_longest_loop_lag_is_read_from_its_metrics(
    tmp_path: Path, text: str | None, want: dict[str, float]
) -> None:
    path = tmp_path / "extender-metrics.txt"
    if text is not None:
        path.write_text(text)
    assert gang_bench._loop_lag(path) == want
