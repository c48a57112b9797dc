"""The gang benchmark's workload: distributions as text, scenarios, the trace generated from a
seed (escher_harness.bench.scenario), the presets, and the replay's timing (bench.replay)."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from typing import Any, Literal

import pytest
from builders import Clock, submitted_pods

from escher_harness.bench import approaches, presets, replay, scenario
from escher_harness.bench.distributions import DistributionError, ints, parse, parse_shapes
from escher_harness.bench.trace import Event, Kind
from escher_harness.localcluster.cpus import CpuSplit

SCENARIO = scenario.Scenario(
    name="s",
    rate=2.0,
    duration=30.0,
    sizes="2:3,4:2,8:1",
    shapes="1/1Gi:3,2/2Gi:1",
    run_time="lognormal:4,0.6,20",
    deadline=30.0,
    attempt_timeout=5.0,
)


# --- distributions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "params", "mean", "support_max"),
    [
        ("4", "choice", (4.0,), 4.0, 4.0),
        ("2:3,4:1", "choice", (2.0, 4.0), 2.5, 4.0),
        ("uniform:1,3", "uniform", (1.0, 3.0), 2.0, 3.0),
        ("exp:5", "exp", (5.0,), 5.0, math.inf),
        ("exp:5,20", "exp", (5.0, 20.0), 5.0, 20.0),
        ("lognormal:4,0.5", "lognormal", (4.0, 0.5), 4 * math.exp(0.125), math.inf),
        ("lognormal:4,0.5,10", "lognormal", (4.0, 0.5, 10.0), 4 * math.exp(0.125), 10.0),
    ],
)
def test_a_distribution_reads_as_written(
    text: str, kind: str, params: tuple[float, ...], mean: float, support_max: float
) -> None:
    d = parse(text)
    assert (d.text, d.kind, d.params) == (text, kind, params)
    assert d.mean() == pytest.approx(mean)
    assert d.support_max() == support_max
    rng = random.Random(7)
    low = min(params) if kind in ("choice", "uniform") else 0.0
    assert all(low <= d.sample(rng) <= support_max for _ in range(500))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty"),
        ("x", "'x' is not a number"),
        ("uniform:3,1", "A <= B"),
        ("uniform:1", "takes 2 numbers"),
        ("exp:0", "must be > 0"),
        ("exp:5,2", "at least the mean"),
        ("lognormal:4", "takes 2 or 3 numbers"),
        ("lognormal:4,0.5,1", "at least the median"),
        ("2:0", "weight > 0"),
        ("nan", "finite"),
        ("-1", ">= 0"),
    ],
)
def test_a_malformed_distribution_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(DistributionError, match=says.replace("(", r"\(")):
        parse(text)


def test_gang_sizes_are_whole_numbers_of_at_least_one() -> None:
    assert ints(parse("2:1,8:3")) == [2, 8]
    for bad in ("uniform:1,4", "1.5", "0"):
        with pytest.raises(DistributionError, match="whole numbers"):
            ints(parse(bad))


def test_shapes_are_cpu_and_memory_quantities() -> None:
    s = parse_shapes("1/1Gi:3,500m/2Gi:1")
    assert s.shapes == (("1", "1Gi"), ("500m", "2Gi"))
    assert s.mean_cpu() == pytest.approx((3 * 1 + 0.5) / 4)
    for bad, says in (("1", "cpu/memory"), ("x/1Gi", "cpu"), ("1/lots", "memory")):
        with pytest.raises(DistributionError, match=says):
            parse_shapes(bad)


@pytest.mark.parametrize(
    "change",
    [{"rate": 0.0}, {"duration": -1.0}, {"deadline": 0.0}, {"sizes": "1.5"}, {"shapes": "1"}],
)
def test_a_bad_scenario_fails_when_it_is_made(change: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        replace(SCENARIO, **change)


# --- the trace -------------------------------------------------------------------------------


def test_the_trace_is_the_same_for_the_same_seed() -> None:
    a, b = scenario.generate(SCENARIO, 42), scenario.generate(SCENARIO, 42)
    assert a == b and len(a) > 20
    assert scenario.digest(a) == scenario.digest(b)
    assert scenario.generate(SCENARIO, 43) != a
    assert scenario.digest(scenario.generate(SCENARIO, 43)) != scenario.digest(a)


def test_the_trace_survives_json_exactly() -> None:
    a = scenario.generate(SCENARIO, 42)
    back = scenario.from_json(json.loads(json.dumps(scenario.to_json(a))))
    assert back == a and scenario.digest(back) == scenario.digest(a)


def test_the_trace_keeps_to_its_scenario() -> None:
    trace = scenario.generate(SCENARIO, 5)
    assert [a.name for a in trace] == [f"g{i:05d}" for i in range(1, len(trace) + 1)]
    assert [a.at for a in trace] == sorted(a.at for a in trace)
    assert all(0 <= a.at < SCENARIO.duration for a in trace)
    assert {a.size for a in trace} <= {2, 4, 8}
    assert {(a.cpu, a.memory) for a in trace} <= {("1", "1Gi"), ("2", "2Gi")}
    assert all(0 < a.run_time <= 20 for a in trace)
    # Poisson arrivals at 2/s for 30 s: about 60 gangs.
    assert 35 < len(trace) < 90


def test_one_changed_parameter_changes_only_its_quantity() -> None:
    """One random stream per quantity: scenarios that differ in run time differ only there."""
    a = scenario.generate(SCENARIO, 9)
    b = scenario.generate(replace(SCENARIO, run_time="uniform:8,16"), 9)
    assert [(x.at, x.size, x.cpu) for x in a] == [(x.at, x.size, x.cpu) for x in b]
    assert [x.run_time for x in a] != [x.run_time for x in b]


# --- presets ---------------------------------------------------------------------------------


# The topology preset has scenarios of its own (tests/unit/harness/bench/test_bench_topology.py).
PAIRED = {k: p for k, p in presets.PRESETS.items() if p.footing.topology is None}


@pytest.mark.parametrize("preset", list(PAIRED.values()), ids=list(PAIRED))
def test_every_preset_contends_in_one_scenario_and_not_in_the_other(
    preset: presets.Preset,
) -> None:
    by = {s.name: s for s in preset.scenarios}
    assert set(by) == {"no-contention", "contention"}
    capacity = preset.capacity_cpu()
    assert by["no-contention"].offered_cpu() < 0.5 * capacity
    assert by["contention"].offered_cpu() > capacity
    assert preset.repeat == (1 if preset.name == "quick" else 3)
    for s in preset.scenarios:
        # At least 20 gangs a scenario, so a p50 is not the second of four samples.
        assert len(scenario.generate(s, preset.seed)) >= 20
        # The largest member fits a node, so no gang is unplaceable by construction.
        shapes = parse_shapes(s.shapes)
        assert max(float(c) for c, _ in shapes.shapes) <= float(preset.footing.node_cpu)


def test_the_escher_preset_is_the_papers_cluster() -> None:
    f = presets.ESCHER.footing
    assert (f.nodes, f.node_cpu) == (32, "8")


def test_the_command_line_changes_a_preset() -> None:
    p = presets.customised(
        presets.STANDARD,
        scenarios=["contention"],
        nodes=4,
        repeat=5,
        seed=11,
        qps=300,
        burst=600,
        extender_scope="every-pod",
        rate=0.5,
        sizes="2",
        deadline=None,
    )
    assert [s.name for s in p.scenarios] == ["contention"]
    assert (p.footing.nodes, p.footing.client_qps, p.footing.client_burst) == (4, 300, 600)
    assert p.footing.extender_scope == "every-pod"
    assert presets.customised(presets.STANDARD).footing.extender_scope == "split"
    assert not presets.customised(presets.STANDARD).footing.cpu_split
    for side in ("scheduling", "extender"):
        footing = presets.customised(presets.STANDARD, cpu_split=side).footing
        assert footing.cpu_split == side
    assert presets.customised(presets.STANDARD).footing.extender_nice == 0
    assert presets.customised(presets.STANDARD, extender_nice=-5).footing.extender_nice == -5
    assert (p.repeat, p.seed) == (5, 11)
    s = p.scenarios[0]
    assert (s.rate, s.sizes, s.deadline) == (0.5, "2", presets.STANDARD.scenarios[1].deadline)
    with pytest.raises(ValueError, match="unknown scenario 'busy'"):
        presets.customised(presets.STANDARD, scenarios=["busy"])
    with pytest.raises(DistributionError):
        presets.customised(presets.STANDARD, sizes="two")


def test_every_approach_gets_the_same_footing(tmp_path: Any) -> None:
    footing = approaches.Footing(nodes=16, node_cpu="8", node_memory="32Gi")
    specs = {a: approaches.cluster_spec(a, tmp_path, footing) for a in approaches.APPROACHES}
    alike = {
        (s.nodes, s.node_cpu, s.node_memory, s.kwok, s.client_qps, s.client_burst)
        for s in specs.values()
    }
    assert alike == {(16, "8", "32Gi", True, 1000.0, 2000)}
    # Each approach samples nodes as it ships (its own configuration) unless equalised.
    assert {s.percentage_of_nodes_to_score for s in specs.values()} == {None}
    equal = approaches.Footing(16, "8", "32Gi", percentage_of_nodes_to_score=100)
    specs = {a: approaches.cluster_spec(a, tmp_path, equal) for a in approaches.APPROACHES}
    assert {s.percentage_of_nodes_to_score for s in specs.values()} == {100}


@pytest.mark.parametrize("side", ["scheduling", "extender"])
def test_a_cpu_split_footing_splits_every_approachs_cluster_alike(tmp_path: Any, side: Any) -> None:
    split = approaches.Footing(nodes=16, node_cpu="8", node_memory="32Gi", cpu_split=side)
    specs = [approaches.cluster_spec(a, tmp_path, split) for a in approaches.APPROACHES]
    assert {s.cpu_split for s in specs} == {CpuSplit.halves(side)}
    shared = approaches.Footing(nodes=16, node_cpu="8", node_memory="32Gi")
    assert approaches.cluster_spec("native", tmp_path, shared).cpu_split is None


def test_the_extenders_share_reaches_every_approachs_cluster(tmp_path: Any) -> None:
    """Every cluster spec carries it; only a cluster with an extender has a process it
    applies to (localcluster.up)."""
    footing = approaches.Footing(nodes=16, node_cpu="8", node_memory="32Gi", extender_nice=-5)
    specs = [approaches.cluster_spec(a, tmp_path, footing) for a in approaches.APPROACHES]
    assert {s.extender_nice for s in specs} == {-5}
    plain = approaches.Footing(nodes=16, node_cpu="8", node_memory="32Gi")
    assert approaches.cluster_spec("extender", tmp_path, plain).extender_nice == 0


@pytest.mark.parametrize("scope", ["split", "every-pod"])
def test_the_extender_approaches_call_the_extender_as_the_footing_says(
    tmp_path: Any, scope: Literal["split", "every-pod"]
) -> None:
    footing = approaches.Footing(nodes=16, node_cpu="8", node_memory="32Gi", extender_scope=scope)
    extender = [a for a in approaches.APPROACHES if a.startswith("extender")]
    assert extender == ["extender", "extender-gated", "extender-adaptive", "extender-marked"]
    specs = [approaches.cluster_spec(a, tmp_path, footing) for a in extender]
    assert [(s.mode, s.scope) for s in specs] == [("extender", scope)] * 4
    assert [s.gang_gate for s in specs] == [False, False, True, True]


MARKERS = {"scheduling.escher.io/gang": "0", "scheduling.escher.io/bind": "0"}


@pytest.mark.parametrize(
    ("approach", "config", "limits", "scheduler"),
    [
        # Marked (and moved to the all-nodes profile) by deploy/'s policy at creation.
        ("extender-adaptive", "extender-split.yaml", None, "default-scheduler"),
        # Created marked, on the profile that looks at every node: the policy skips it.
        ("extender-marked", "extender-split.yaml", MARKERS, "default-scheduler-all-nodes"),
        # Every pod every exchange: one profile, no other name to take.
        ("extender-marked", "extender.yaml", MARKERS, "default-scheduler"),
    ],
)  # fmt: skip
def test_marked_members_are_created_with_their_markers(
    monkeypatch: pytest.MonkeyPatch,
    approach: str,
    config: str,
    limits: dict[str, str] | None,
    scheduler: str,
) -> None:
    a = scenario.GangArrival(0.0, "g00001", 3, "1", "1Gi", 1.0)
    job = approaches.GangJob(a, 60, 10)
    completed, created = submitted_pods(monkeypatch, approach, job, config)
    assert completed
    assert len(created) == 3
    for pod in created:
        assert pod["spec"]["schedulerName"] == scheduler
        resources = pod["spec"]["containers"][0]["resources"]
        assert resources.get("limits") == limits
        assert resources["requests"] == {"cpu": "1", "memory": "1Gi"}
        assert pod["metadata"]["labels"] == {"escher.io/gang": "g00001"}


# --- the replay ------------------------------------------------------------------------------


def test_each_gang_is_handed_over_at_its_planned_time() -> None:
    trace = scenario.generate(SCENARIO, 3)
    clock = Clock()
    spawned: list[tuple[str, float, float]] = []
    replay.replay(
        list(reversed(trace)),  # the order given does not matter
        clock.now + 1,
        lambda a, due: spawned.append((a.name, due, clock.now)),
        clock.sleep,
        clock,
    )
    assert [n for n, _, _ in spawned] == [a.name for a in trace]
    planned = [1001 + a.at for a in trace]
    assert [due for _, due, _ in spawned] == pytest.approx(planned)
    assert all(now == pytest.approx(due) for _, due, now in spawned)


def test_a_late_replay_does_not_wait_and_hands_over_at_once() -> None:
    trace = scenario.generate(SCENARIO, 3)[:3]
    clock = Clock()
    slept: list[float] = []
    replay.replay(trace, clock.now - 100, lambda a, due: None, slept.append, clock)
    assert slept == []


@pytest.mark.parametrize(
    ("outcome", "kinds"),
    [
        (True, [Kind.SUBMIT, Kind.DONE]),
        (False, [Kind.SUBMIT, Kind.TIMEOUT]),
        (RuntimeError("API down"), [Kind.SUBMIT, Kind.TIMEOUT]),
    ],
    ids=["complete", "given-up", "failed"],
)
def test_a_gangs_life(monkeypatch: pytest.MonkeyPatch, outcome: Any, kinds: list[Kind]) -> None:
    calls: list[str] = []

    def submit(approach: str, env: Any, job: approaches.GangJob) -> bool:
        calls.append(f"submit {approach} {job.name}")
        if isinstance(outcome, Exception):
            raise outcome
        return bool(outcome)

    monkeypatch.setattr(approaches, "submit", submit)
    monkeypatch.setattr(approaches, "start", lambda env, job: calls.append("start") or ("m0", "m1"))
    monkeypatch.setattr(approaches, "delete", lambda a, env, job: calls.append("delete"))

    class Waits:
        def succeeded(self, names: Any, timeout: float) -> int:
            calls.append(f"succeeded {list(names)} {timeout:g}")
            return len(names)

    arrival = scenario.GangArrival(1.0, "g00001", 2, "1", "1Gi", 4.0)
    emitted: list[Event] = []
    clock = Clock()
    out = replay.life(
        "extender",
        None,  # type: ignore[arg-type]
        Waits(),  # type: ignore[arg-type]
        approaches.GangJob(arrival, deadline=10, attempt_timeout=5),
        clock.now - 0.25,
        emitted.append,
        clock,
    )
    assert [e.kind for e in emitted] == kinds
    assert emitted[0].due == clock.now - 0.25 and emitted[0].size == 2
    assert out.completed is (outcome is True)
    assert (out.error is outcome) if isinstance(outcome, Exception) else out.error is None
    if outcome is True:
        # It runs: members get their run time, are waited for, then deleted.
        assert calls == [
            "submit extender g00001",
            "start",
            f"succeeded ['m0', 'm1'] {4 + replay.SUCCEED_SLACK:g}",
            "delete",
        ]
    else:
        # Given up: deleted at once, never started.
        assert calls == ["submit extender g00001", "delete"]
