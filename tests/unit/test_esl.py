"""Every ESL against a cluster simulated in memory: a real Ledger behind a LedgerBackend
(the fake Backend), and a tiny scheduler that places pods as kube-scheduler would (fit on
ephemeral and physical resources; spread by least allocated, or by the extender's
Preference scorer when the backend scores). Checks each policy's promised outcome, its
parameter errors, and that teardown leaves no resource behind."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest

from escher_harness.workload import pod_manifest
from extender.esl import compose, queues
from extender.esl.antiaffinity import AntiAffinity, AntiAffinityParams
from extender.esl.backends import LedgerBackend
from extender.esl.base import (
    UNBOUNDED,
    ESLParams,
    InvalidParameters,
    NoRoom,
    PodRequest,
    UnknownKey,
    Unsatisfiable,
    parse_params,
)
from extender.esl.binpack import BinPack, BinPackParams
from extender.esl.colocation import Colocation, ColocationParams
from extender.esl.compose import Compose, ComposeParams
from extender.esl.fairshare import FairShare, FairShareParams
from extender.esl.loadbalance import LoadBalance, LoadBalanceParams
from extender.esl.locality import Locality, LocalityParams
from extender.esl.queues import Queues, QueuesParams
from extender.esl.registry import REGISTRY
from extender.esl.sequencing import Sequencing, SequencingParams
from extender.esl.soft import Soft, SoftParams
from extender.filters.base import PodInfo
from extender.filters.preference import Preference
from extender.ledger import Ledger
from extender.resources import CPU, pod_amounts, split

D = "escher.io"
_uid = itertools.count()


class Sim:
    """Nodes node-0.. of `cpu` cores each; pods placed one at a time."""

    def __init__(
        self,
        nodes: int = 4,
        cpu: int = 4,
        scores: bool = False,
        labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.ledger = Ledger(D)
        for i in range(nodes):
            name = f"node-{i}"
            phys = {"cpu": cpu * 1000, "memory": 64 << 30, "pods": 110}
            self.ledger.upsert_node(name, dict((labels or {}).get(name, {})), phys)
        self.backend = LedgerBackend(self.ledger, D, scores=scores)
        self.where: dict[str, str] = {}  # pod -> node
        self.pref = Preference()

    def place(self, req: PodRequest, cpu: str | None = None) -> str | None:
        """Place one pod asking `req` (plus `cpu`); its node, or None (pending)."""
        name = f"p{next(_uid)}"
        limits = dict(req.limits)
        if cpu and CPU not in limits:
            limits[CPU] = cpu
        manifest = pod_manifest(name, limits=limits, annotations=req.annotations)
        amounts = pod_amounts(manifest)
        eph, _ = split(amounts, D)
        nodes = sorted(self.ledger.node_names())
        bad = set(self.ledger.shortfalls(nodes, eph)) if eph else set()
        bad |= set(self.ledger.physical_shortfalls(nodes, amounts))
        feasible = [n for n in nodes if n not in bad]
        if not feasible:
            return None
        pod = PodInfo(name, "default", name, {}, req.annotations, amounts, eph, manifest)
        score = self.pref.score(pod, feasible, self.ledger) if self.backend.scores else {}
        # As kube-scheduler's LeastAllocated, which counts pods without requests at a default
        # size: the node with the fewest pods, then the name.
        used = {n: self.ledger.node(n).used.get("pods", 0) for n in feasible}  # type: ignore[union-attr]
        node = min(feasible, key=lambda n: (-score.get(n, 0), used[n], n))
        self.ledger.observe_bound(name, node, amounts)
        self.where[name] = node
        return node

    def place_all(self, req: PodRequest, k: int, cpu: str | None = None) -> list[str | None]:
        return [self.place(req, cpu) for _ in range(k)]

    def finish(self, node: str | None = None) -> None:
        """One pod (on `node`, if given) finishes."""
        name = next(p for p, n in self.where.items() if node in (None, n))
        self.ledger.release(name)
        del self.where[name]

    def ours(self) -> set[str]:
        """Every escher.io resource on any node."""
        return {r for v in self.ledger.snapshot().nodes.values() for r in v.ephemeral}


# ---- parameters ----------------------------------------------------------------------------

BAD_PARAMS: list[tuple[type[ESLParams], dict[str, Any], str, str]] = [
    (ColocationParams, {"name": "g", "groups": {}}, "groups", "at least 1"),
    (ColocationParams, {"name": "g", "groups": {"a": 0}}, "groups.a", "greater than or equal"),
    (ColocationParams, {"name": "g", "groups": {"a": 2}, "cpu": "lots"}, "cpu", "invalid"),
    (ColocationParams, {"name": "g", "groups": {"a": "2"}}, "groups.a", "valid integer"),
    (ColocationParams, {"groups": {"a": 2}}, "name", "Field required"),
    (ColocationParams, {"name": "G!", "groups": {"a": 2}}, "name", "must be 1-30"),
    (ColocationParams, {"name": "g", "groups": {"a": 2}, "gpus": 1}, "gpus", "not permitted"),
    (LoadBalanceParams, {"name": "l"}, "", "tasks is required in static mode"),
    (LoadBalanceParams, {"name": "l", "mode": "round"}, "mode", "'static' or 'dynamic'"),
    (LocalityParams, {"name": "d"}, "", "exactly one of node, node_selector"),
    (SequencingParams, {"name": "s", "stages": ["a"]}, "stages", "at least 2"),
    (SequencingParams, {"name": "s", "stages": ["a", "a"]}, "stages", "unique"),
    (QueuesParams, {"name": "q", "weights": {"a": 1}}, "slots", "Field required"),
    (
        FairShareParams,
        {"name": "f", "slots": 2, "groups": {"x": {"users": {"u": 1}}, "y": {"users": {"u": 1}}}},
        "",
        "user u is in both groups x and y",
    ),
    (SoftParams, {"name": "s", "alternatives": []}, "alternatives", "at least 1"),
    (SoftParams, {"name": "s", "alternatives": [{}], "timeout_seconds": 0}, "timeout", "greater"),
    (ComposeParams, {"name": "c", "op": "xor", "pods": 1}, "op", "'and' or 'or'"),
]


@pytest.mark.parametrize(("cls", "data", "field", "fragment"), BAD_PARAMS)
def test_impossible_parameters_raise_naming_the_field(
    cls: type[ESLParams], data: dict[str, Any], field: str, fragment: str
) -> None:
    with pytest.raises(InvalidParameters) as e:
        parse_params(cls, data)
    assert (e.value.field or "").startswith(field) and fragment in str(e.value), str(e.value)


def test_every_registered_esl_has_a_name_prefix_and_params() -> None:
    for kind, cls in REGISTRY.items():
        assert kind == cls.NAME and issubclass(cls.Params, ESLParams)


def test_merge_takes_the_larger_amount_and_refuses_contradictions() -> None:
    a = PodRequest(limits={"cpu": "500m", f"{D}/x": "1"}, labels={"app": "a"})
    b = PodRequest(limits={"cpu": "1", f"{D}/y": "1"}, labels={"tier": "web"})
    assert a.merge(b).limits == {"cpu": "1", f"{D}/x": "1", f"{D}/y": "1"}
    assert a.merge(b).labels == {"app": "a", "tier": "web"}
    with pytest.raises(Unsatisfiable, match="label app is asked to be both 'a' and 'b'"):
        a.merge(PodRequest(limits={}, labels={"app": "b"}))


# ---- co-location ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("busy", "groups", "expect"),
    [
        ({}, {"a": 3}, {"a": 3}),
        # the group goes where there is room for all of it
        ({"node-0": 2, "node-1": 2, "node-2": 2}, {"a": 3}, {"a": 3}),
        # two groups that cannot share a node get one each
        ({}, {"a": 3, "b": 3}, {"a": 3, "b": 3}),
    ],
)
def test_colocation_puts_each_group_on_one_node(
    busy: dict[str, int], groups: dict[str, int], expect: dict[str, int]
) -> None:
    sim = Sim(nodes=4, cpu=4)
    for node, cores in busy.items():
        sim.ledger.observe_bound(f"busy-{node}", node, {"cpu": cores * 1000, "pods": 1})
    esl = Colocation(sim.backend, ColocationParams(name="web", groups=groups, cpu="1"))
    esl.apply()
    placed = {g: Counter(sim.place_all(esl.requests_for(g), n + 1)) for g, n in groups.items()}
    nodes = set()
    for g, count in placed.items():
        node = esl.node_of(g)
        assert count == {node: expect[g], None: 1}  # all on one node; one more does not fit
        nodes.add(node)
    assert len(nodes) == len(groups)
    esl.teardown()
    assert esl.resources() == [] and sim.ours() == set()


@pytest.mark.parametrize(
    ("busy", "size", "error", "fragment"),
    [
        ({}, 5, Unsatisfiable, "group a of 5 members (cpu: 1000, pods: 1 each) can never"),
        ({"node-0": 2, "node-1": 2}, 3, NoRoom, "no node has room for it now"),
    ],
)
def test_colocation_that_cannot_fit(
    busy: dict[str, int], size: int, error: type[Exception], fragment: str
) -> None:
    sim = Sim(nodes=2, cpu=4)
    for node, cores in busy.items():
        sim.ledger.observe_bound(f"busy-{node}", node, {"cpu": cores * 1000})
    esl = Colocation(sim.backend, ColocationParams(name="x", groups={"a": size}, cpu="1"))
    with pytest.raises(error, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        esl.apply()
    assert sim.ours() == set()


def test_colocation_apply_is_idempotent_and_keys_are_checked() -> None:
    sim = Sim()
    esl = Colocation(sim.backend, ColocationParams(name="x", groups={"a": 2}))
    esl.apply()
    node = esl.node_of("a")
    sim.place(esl.requests_for("a"))
    esl.apply()  # the group is not moved to another node
    assert esl.node_of("a") == node and esl.resources() == [f"{D}/coloc-x-a"]
    with pytest.raises(UnknownKey, match="no key 'b'"):
        esl.requests_for("b")


# ---- anti-affinity -------------------------------------------------------------------------


def test_antiaffinity_one_pod_per_node() -> None:
    sim = Sim(nodes=4)
    esl = AntiAffinity(sim.backend, AntiAffinityParams(name="a", pods=4))
    esl.apply()
    placed = sim.place_all(esl.requests_for(), 5)
    assert sorted(placed[:4]) == ["node-0", "node-1", "node-2", "node-3"] and placed[4] is None


def test_antiaffinity_more_pods_than_nodes_is_unsatisfiable_and_leaves_nothing() -> None:
    sim = Sim(nodes=4)
    esl = AntiAffinity(sim.backend, AntiAffinityParams(name="a", pods=5))
    with pytest.raises(Unsatisfiable, match="5 anti-affine pods need 5 nodes; only 4 match"):
        esl.apply()
    assert sim.ours() == set() and esl.resources() == []


# ---- load balancing ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "pods", "expect"),
    [
        ({"mode": "static", "tasks": 8}, 8, [2, 2, 2, 2]),
        ({"mode": "static", "tasks": 6}, 6, [2, 2, 1, 1]),
        ({"mode": "static", "tasks": 6}, 9, [2, 2, 2, 2]),  # ceil(6/4) = 2 caps each node
        ({"mode": "dynamic"}, 6, [2, 2, 1, 1]),
        ({"mode": "dynamic"}, 9, [3, 2, 2, 2]),
    ],
)
def test_loadbalance_spreads_within_one_of_even(
    params: dict[str, Any], pods: int, expect: list[int]
) -> None:
    sim = Sim(nodes=4, cpu=32)
    esl = LoadBalance(sim.backend, LoadBalanceParams(name="lb", **params))
    esl.apply()
    placed: list[str] = []
    for _ in range(pods):
        node = sim.place(esl.requests_for())
        if node is None and esl.step():  # dynamic: every unit used, one more everywhere
            node = sim.place(esl.requests_for())
        if node:
            placed.append(node)
    assert sorted(Counter(placed).values(), reverse=True) == expect


def test_dynamic_loadbalance_waits_until_every_unit_is_used() -> None:
    sim = Sim(nodes=2)
    esl = LoadBalance(sim.backend, LoadBalanceParams(name="lb", mode="dynamic"))
    esl.apply()
    sim.place(esl.requests_for())
    assert esl.step() == []
    sim.place(esl.requests_for())
    (change,) = esl.step()
    assert change.nodes == {"node-0": 2, "node-1": 2} and "every unit used" in change.why


# ---- locality ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "expect"),
    [
        ({"node": "node-2"}, {"node-2"}),
        ({"node_selector": {"disk": "data"}}, {"node-1", "node-3"}),
    ],
)
def test_locality_places_pods_where_the_data_is(params: dict[str, Any], expect: set[str]) -> None:
    labels = {"node-1": {"disk": "data"}, "node-3": {"disk": "data"}}
    sim = Sim(nodes=4, labels=labels)
    esl = Locality(sim.backend, LocalityParams(name="ds", **params))
    esl.apply()
    assert set(sim.place_all(esl.requests_for(), 6)) == expect


def test_locality_on_an_unknown_node_is_refused_by_the_backend() -> None:
    sim = Sim()
    esl = Locality(sim.backend, LocalityParams(name="ds", node="nope"))
    with pytest.raises(Exception, match="nope") as e:
        esl.apply()
    assert getattr(e.value, "status", None) == 404


# ---- bin-packing ---------------------------------------------------------------------------


@pytest.mark.parametrize("scores", [False, True])
def test_binpack_uses_the_fewest_nodes(scores: bool) -> None:
    sim = Sim(nodes=4, cpu=4, scores=scores)
    esl = BinPack(sim.backend, BinPackParams(name="b", cpu="2"))
    esl.apply()
    placed = []
    for _ in range(5):
        node = sim.place(esl.requests_for())
        if node is None:  # pure approach: the set is full, grow it by one node
            assert not scores and esl.step()
            node = sim.place(esl.requests_for())
        placed.append(node)
    assert sorted(Counter(placed).values()) == [1, 2, 2]  # 5 pods of 2 cpu: 3 nodes of 4
    req = esl.requests_for()
    assert (f"{D}/pack" in req.annotations) == scores
    assert len(esl.where(esl.short())) == (4 if scores else 3)


def test_binpack_grows_only_when_the_set_is_full() -> None:
    sim = Sim(nodes=3, cpu=4)
    esl = BinPack(sim.backend, BinPackParams(name="b", cpu="2"))
    esl.apply()
    assert list(esl.where(esl.short())) == ["node-0"]
    sim.place(esl.requests_for())
    assert esl.step() == []  # room for one more
    sim.place(esl.requests_for())
    (change,) = esl.step()
    assert change.nodes == {"node-1": UNBOUNDED}


# ---- sequencing ----------------------------------------------------------------------------


def test_sequencing_places_the_next_stage_only_after_a_signal() -> None:
    sim = Sim()
    esl = Sequencing(sim.backend, SequencingParams(name="etl", stages=["extract", "load"]))
    esl.apply()
    assert sim.place(esl.requests_for("load")) is None
    assert sim.place(esl.requests_for("extract"))
    changes = esl.signal("extract")
    assert [c.resource for c in changes] == [f"{D}/seq-etl-extract", f"{D}/seq-etl-load"]
    assert sim.place(esl.requests_for("load"))
    assert esl.resources() == [f"{D}/seq-etl-load"]


def test_sequencing_step_signals_a_stage_whose_pods_all_finished() -> None:
    sim = Sim()
    esl = Sequencing(sim.backend, SequencingParams(name="s", stages=["a", "b", "c"], pods=2))
    esl.apply()
    assert esl.step() == []  # nothing ran yet: not finished
    sim.place_all(esl.requests_for("a"), 2)
    assert esl.step() == []  # running
    sim.finish()
    assert esl.step() == []  # one of two still running
    sim.finish()
    assert [c.resource for c in esl.step()][-1] == f"{D}/seq-s-b"
    assert sim.place(esl.requests_for("b")) and sim.place(esl.requests_for("c")) is None


# ---- queues --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "weights", "wants", "expect"),
    [
        (3, {"a": 2, "b": 1}, {"a": 9, "b": 9}, {"a": 2, "b": 1}),
        (3, {"a": 2, "b": 1}, {"a": 0, "b": 9}, {"a": 0, "b": 3}),
        (6, {"a": 1, "b": 1, "c": 1}, {"a": 1, "b": 9, "c": 9}, {"a": 1, "b": 3, "c": 2}),
        (4, {"a": 1, "b": 1, "c": 1}, {"a": 9, "b": 9, "c": 9}, {"a": 2, "b": 1, "c": 1}),
        (5, {"a": 3, "b": 1}, {"a": 2, "b": 2}, {"a": 2, "b": 2}),
    ],
)
def test_weighted_shares(
    total: int, weights: dict[str, int], wants: dict[str, int], expect: dict[str, int]
) -> None:
    assert queues.weighted_shares(total, weights, wants) == expect


def test_queues_drain_in_weight_proportion() -> None:
    sim = Sim(nodes=2, cpu=32)
    esl = Queues(sim.backend, QueuesParams(name="jobs", weights={"a": 2, "b": 1}, slots=3))
    esl.apply()
    assert esl.resources() == []  # every queue starts at 0
    pending = {"a": 6, "b": 6}
    rounds = []
    while any(pending.values()):
        esl.report(pending)
        esl.step()
        placed = Counter()
        for q in ("a", "b"):
            while pending[q] and sim.place(esl.requests_for(q)):
                pending[q] -= 1
                placed[q] += 1
        rounds.append((placed["a"], placed["b"]))
        while sim.where:  # the round's pods finish
            sim.finish()
    # 2:1 while both wait; once a is drained, b takes every slot
    assert rounds == [(2, 1), (2, 1), (2, 1), (0, 3)]
    esl.teardown()
    assert sim.ours() == set()


def test_queues_never_shrink_below_running_pods() -> None:
    sim = Sim(nodes=2)
    esl = Queues(sim.backend, QueuesParams(name="q", weights={"a": 1, "b": 1}, slots=2))
    esl.report({"a": 2, "b": 0})
    esl.step()
    assert [sim.place(esl.requests_for("a")) is not None for _ in range(3)] == [True, True, False]
    esl.report({"a": 0, "b": 5})
    esl.step()  # b wants everything but a's two pods still run
    assert sim.place(esl.requests_for("b")) is None
    sim.finish()
    esl.step()
    assert sim.place(esl.requests_for("b")) is not None


# ---- fair share ----------------------------------------------------------------------------


def fs_params(slots: int) -> FairShareParams:
    return FairShareParams(
        name="fs",
        slots=slots,
        groups={
            "research": {"weight": 1, "users": {"ann": 1, "bob": 1}},  # type: ignore[dict-item]
            "prod": {"weight": 1, "users": {"cy": 1}},  # type: ignore[dict-item]
        },
    )


@pytest.mark.parametrize(
    ("backlog", "expect"),
    [
        ({"ann": 9, "bob": 9, "cy": 9}, {"ann": 2, "bob": 2, "cy": 4}),
        ({"ann": 9, "bob": 9, "cy": 0}, {"ann": 4, "bob": 4, "cy": 0}),
        ({"ann": 9, "bob": 1, "cy": 9}, {"ann": 3, "bob": 1, "cy": 4}),
        ({"ann": 0, "bob": 0, "cy": 3}, {"ann": 0, "bob": 0, "cy": 3}),
    ],
)
def test_fairshare_is_hierarchical(backlog: dict[str, int], expect: dict[str, int]) -> None:
    sim = Sim(nodes=2, cpu=32)
    esl = FairShare(sim.backend, fs_params(8))
    esl.report(backlog)
    esl.step()
    placed = {u: sum(1 for _ in range(9) if sim.place(esl.requests_for(u))) for u in backlog}
    assert placed == expect


def test_fairshare_resizes_as_users_leave() -> None:
    sim = Sim(nodes=2, cpu=32)
    esl = FairShare(sim.backend, fs_params(4))
    esl.step()  # no reports: everybody backlogged
    for u in ("ann", "bob", "cy"):
        while sim.place(esl.requests_for(u)):
            pass
    assert Counter(sim.where.values()).total() == 4
    for name in [p for p, _ in list(sim.where.items())]:
        sim.ledger.release(name)
    sim.where.clear()
    esl.report({"ann": 5, "bob": 5, "cy": 0})  # prod has nothing left to run
    esl.step()
    assert [sum(1 for _ in range(5) if sim.place(esl.requests_for(u))) for u in ("ann", "bob")] == [
        2,
        2,
    ]


# ---- soft constraints ----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def soft(sim: Sim, clock: Clock) -> Soft:
    params = SoftParams(name="s", alternatives=[{"node": "node-0"}, {}], timeout_seconds=5, pods=2)  # type: ignore[list-item]
    esl = Soft(sim.backend, params, clock=clock)
    esl.apply()
    return esl


def test_soft_pure_falls_back_after_the_timeout() -> None:
    sim, clock = Sim(nodes=3, cpu=2), Clock()
    sim.ledger.observe_bound("filler", "node-0", {"cpu": 2000})  # the first choice is full
    esl = soft(sim, clock)
    assert sim.place(esl.requests_for(), cpu="1") is None
    clock.t += 4.9
    assert esl.step() == []  # not yet
    clock.t += 0.1
    (change,) = esl.step()
    assert "2 of 2 pods not placed within 5s: falling back to alternative 1" in change.why
    assert esl.current == 1
    assert {sim.place(esl.requests_for(), cpu="1") for _ in range(2)} <= {"node-1", "node-2"}
    assert esl.step() == []  # the last alternative: nothing after it


def test_soft_pure_does_not_fall_back_when_placed() -> None:
    sim, clock = Sim(nodes=3), Clock()
    esl = soft(sim, clock)
    assert [sim.place(esl.requests_for()) for _ in range(2)] == ["node-0", "node-0"]
    clock.t += 60
    assert esl.step() == [] and esl.current == 0


@pytest.mark.parametrize(("filler", "expect"), [(0, "node-0"), (2, "node-1")])
def test_soft_with_scores_takes_the_best_alternative_at_once(filler: int, expect: str) -> None:
    sim, clock = Sim(nodes=3, cpu=2, scores=True), Clock()
    if filler:
        sim.ledger.observe_bound("filler", "node-0", {"cpu": filler * 1000})
    esl = soft(sim, clock)
    req = esl.requests_for()
    assert req.annotations == {f"{D}/prefer": "soft-s-0,soft-s-1"}
    assert sim.place(req, cpu="1") == expect  # no timeout, no resubmission
    assert esl.step() == []


# ---- composition ---------------------------------------------------------------------------


def test_and_colocation_with_loadbalance_spreads_the_groups() -> None:
    sim = Sim(nodes=4, cpu=32)
    groups = {"a": 2, "b": 2, "c": 2, "d": 2}
    coloc = Colocation(sim.backend, ColocationParams(name="g", groups=groups))
    lb = LoadBalance(sim.backend, LoadBalanceParams(name="lb", tasks=8))
    esl = Compose(sim.backend, ComposeParams(name="c", op="and", pods=8), [coloc, lb])
    esl.apply()
    assert esl.request_keys() == ["a", "b", "c", "d"]
    assert esl.requests_for("a").limits == {f"{D}/coloc-g-a": "1", f"{D}/lb-lb": "1"}
    placed = {g: {sim.place(esl.requests_for(g)) for _ in range(2)} for g in groups}
    assert all(len(nodes) == 1 for nodes in placed.values())  # co-located
    assert Counter(sim.where.values()) == dict.fromkeys(sim.ledger.node_names(), 2)  # balanced


@pytest.mark.parametrize(
    ("parts", "fragment"),
    [
        (
            [
                {"kind": "antiaffinity", "params": {"name": "a"}},
                {"kind": "colocation", "params": {"name": "g", "groups": {"all": 5}}},
            ],
            "group all of 5 members (escher.io/anti-a: 1, pods: 1 each) can never share a node",
        ),
        (
            [
                {"kind": "antiaffinity", "params": {"name": "a"}},
                {"kind": "locality", "params": {"name": "d", "node": "node-1"}},
            ],
            "antiaffinity a AND locality d can never hold 5 pods: where every resource they "
            "request exists (escher.io/anti-a: 1, escher.io/data-d: 1), at most 1 fit",
        ),
    ],
)
def test_and_that_can_never_be_satisfied_is_reported_and_leaves_nothing(
    parts: list[dict[str, Any]], fragment: str
) -> None:
    sim = Sim(nodes=4)
    params = parse_params(ComposeParams, {"name": "c", "op": "and", "pods": 5, "parts": parts})
    esl = Compose(sim.backend, params)
    with pytest.raises(Unsatisfiable) as e:
        esl.apply()
    assert str(e.value).startswith("composition c: ") and fragment in str(e.value)
    assert sim.ours() == set()


@pytest.mark.parametrize(
    ("parts", "field", "fragment"),
    [
        ([{"kind": "gang", "params": {}}], "parts.0.kind", "'gang' is not an ESL to compose"),
        ([{"kind": "compose", "params": {}}], "parts.0.kind", "not an ESL to compose"),
        ([{"kind": "locality", "params": {"name": "d"}}], "parts.0.params", "exactly one of"),
        ([{"kind": "locality", "params": {"name": "d", "node": "n"}}], "parts", "at least two"),
        (
            [
                {"kind": "queues", "params": {"name": "q", "weights": {"a": 1}, "slots": 1}},
                {"kind": "colocation", "params": {"name": "g", "groups": {"b": 1}}},
            ],
            "parts",
            "at most one part may be keyed",
        ),
    ],
)
def test_bad_compositions_name_the_part(
    parts: list[dict[str, Any]], field: str, fragment: str
) -> None:
    params = parse_params(ComposeParams, {"name": "c", "op": "and", "pods": 1, "parts": parts})
    with pytest.raises(InvalidParameters) as e:
        Compose(Sim().backend, params)
    assert (e.value.field or "").startswith(field) and fragment in str(e.value)


def test_or_falls_back_to_the_next_part_after_the_timeout() -> None:
    sim, clock = Sim(nodes=3), Clock()
    first = Locality(sim.backend, LocalityParams(name="near", node="node-0", slots=1))
    second = AntiAffinity(sim.backend, AntiAffinityParams(name="any"))
    params = ComposeParams(name="c", op="or", pods=2, timeout_seconds=5)
    esl = Compose(sim.backend, params, [first, second], clock=clock)
    esl.apply()
    assert [sim.place(esl.requests_for()) for _ in range(2)] == ["node-0", None]
    clock.t += 5
    changes = esl.step()
    assert changes and "falling back to antiaffinity any" in changes[0].why
    assert sim.place(esl.requests_for()) in {"node-1", "node-2"}
    esl.teardown()
    assert sim.ours() == set()


def test_compose_module_is_registered() -> None:
    assert REGISTRY["compose"] is compose.Compose
