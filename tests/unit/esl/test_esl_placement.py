"""The ESLs that decide where pods go, against the simulated cluster (eslsim): co-location,
anti-affinity, load balancing, data locality and bin-packing. Each checks the placement the
policy promises, the refusals it names, and that teardown leaves no resource behind."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from eslsim import D, Sim

from extender.core.errors import NoMatch, UnknownNode
from extender.esl.antiaffinity import AntiAffinity, AntiAffinityParams
from extender.esl.base import UNBOUNDED
from extender.esl.binpack import BinPack, BinPackParams
from extender.esl.colocation import Colocation, ColocationParams
from extender.esl.errors import NoRoom, UnknownKey, Unsatisfiable
from extender.esl.loadbalance import LoadBalance, LoadBalanceParams
from extender.esl.locality import Locality, LocalityParams

# ---- co-location ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("busy", "groups"),
    [
        pytest.param({}, {"a": 3}, id="empty-cluster"),
        pytest.param({"node-0": 2, "node-1": 2, "node-2": 2}, {"a": 3}, id="where-it-fits"),
        pytest.param({}, {"a": 3, "b": 3}, id="two-groups-two-nodes"),
        pytest.param({"node-3": 1}, {"a": 2, "b": 2, "c": 1}, id="largest-first"),
    ],
)
def test_colocation_puts_each_group_on_one_node(
    busy: dict[str, int], groups: dict[str, int]
) -> None:
    sim = Sim(nodes=4, cpu=4)
    for node, cores in busy.items():
        sim.busy(node, cores)
    esl = Colocation(sim.backend, ColocationParams(name="web", groups=groups, cpu="1"))
    esl.apply()
    for g, n in groups.items():
        node = esl.node_of(g)
        # All n on the group's node, and one more does not fit anywhere.
        assert Counter(sim.place_all(esl.requests_for(g), n + 1)) == {node: n, None: 1}
    assert len({esl.node_of(g) for g in groups}) == len(groups)  # no node holds two groups
    esl.teardown()
    assert esl.resources() == [] and sim.ours() == set()


@pytest.mark.parametrize(
    ("busy", "size", "error", "message"),
    [
        pytest.param(
            {},
            5,
            Unsatisfiable,
            "group a of 5 members (cpu: 1000, pods: 1 each) can never share a node: no node is "
            "that large",
            id="never",
        ),
        pytest.param(
            {"node-0": 2, "node-1": 2},
            3,
            NoRoom,
            "group a of 3 members (cpu: 1000, pods: 1 each): no node has room for it now",
            id="not-now",
        ),
    ],
)
def test_colocation_that_cannot_fit_names_the_group_and_creates_nothing(
    busy: dict[str, int], size: int, error: type[Exception], message: str
) -> None:
    sim = Sim(nodes=2, cpu=4)
    for node, cores in busy.items():
        sim.busy(node, cores)
    esl = Colocation(sim.backend, ColocationParams(name="x", groups={"a": size}, cpu="1"))
    with pytest.raises(error) as e:
        esl.apply()
    assert (str(e.value), getattr(e.value, "field", None)) == (message, "groups")
    assert sim.ours() == set() and esl.resources() == []


def test_colocation_apply_is_idempotent_and_keys_are_checked() -> None:
    sim = Sim()
    esl = Colocation(sim.backend, ColocationParams(name="x", groups={"a": 2}))
    esl.apply()
    node = esl.node_of("a")
    sim.place(esl.requests_for("a"))
    sim.busy(str(node), 3)  # now another node has more room: the group must not move
    esl.apply()
    assert esl.node_of("a") == node and esl.resources() == [f"{D}/coloc-x-a"]
    assert esl.request_keys() == ["a"]
    with pytest.raises(UnknownKey, match="no key 'b'"):
        esl.requests_for("b")


# ---- anti-affinity -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "params", "nodes"),
    [
        pytest.param({}, {"pods": 4}, ["node-0", "node-1", "node-2", "node-3"], id="every-node"),
        pytest.param(
            {"node-1": {"ssd": "y"}, "node-3": {"ssd": "y"}},
            {"node_selector": {"ssd": "y"}},
            ["node-1", "node-3"],
            id="selected-nodes",
        ),
    ],
)
def test_antiaffinity_one_pod_per_node(
    labels: dict[str, dict[str, str]], params: dict[str, Any], nodes: list[str]
) -> None:
    sim = Sim(nodes=4, labels=labels)
    esl = AntiAffinity(sim.backend, AntiAffinityParams(name="a", **params))
    esl.apply()
    placed = sim.place_all(esl.requests_for(), len(nodes) + 1)
    assert sorted(n for n in placed if n) == nodes and placed[-1] is None
    esl.teardown()
    assert sim.ours() == set()


@pytest.mark.parametrize(
    ("params", "error", "message"),
    [
        pytest.param(
            {"pods": 5},
            Unsatisfiable,
            "5 anti-affine pods need 5 nodes; only 4 match",
            id="more-pods-than-nodes",
        ),
        pytest.param(
            {"node_selector": {"ssd": "y"}},
            NoMatch,
            "node_selector {'ssd': 'y'} matches no node",
            id="selector-matches-nothing",
        ),
    ],
)
def test_antiaffinity_refusals_leave_nothing(
    params: dict[str, Any], error: type[Exception], message: str
) -> None:
    sim = Sim(nodes=4)
    esl = AntiAffinity(sim.backend, AntiAffinityParams(name="a", **params))
    with pytest.raises(error) as e:
        esl.apply()
    assert str(e.value) == message
    assert sim.ours() == set() and esl.resources() == []


# ---- load balancing ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "pods", "expect"),
    [
        pytest.param({"mode": "static", "tasks": 8}, 8, [2, 2, 2, 2], id="static-even"),
        pytest.param({"mode": "static", "tasks": 6}, 6, [2, 2, 1, 1], id="static-uneven"),
        # ceil(6/4) = 2 caps each node: pods beyond the tasks stay pending at 8
        pytest.param({"mode": "static", "tasks": 6}, 9, [2, 2, 2, 2], id="static-caps"),
        pytest.param({"mode": "dynamic"}, 6, [2, 2, 1, 1], id="dynamic-6"),
        pytest.param({"mode": "dynamic"}, 9, [3, 2, 2, 2], id="dynamic-9"),
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


def test_dynamic_loadbalance_grows_only_once_every_unit_is_used() -> None:
    sim = Sim(nodes=2)
    esl = LoadBalance(sim.backend, LoadBalanceParams(name="lb", mode="dynamic"))
    esl.apply()
    sim.place(esl.requests_for())
    assert esl.step() == []
    sim.place(esl.requests_for())
    (change,) = esl.step()
    assert change.nodes == {"node-0": 2, "node-1": 2}
    assert change.why == "every unit used: 2 per node"
    esl.apply()  # re-applying keeps the grown capacities
    assert sim.capacities(f"{D}/lb-lb") == {"node-0": 2, "node-1": 2}


# ---- locality ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "expect"),
    [
        pytest.param({"node": "node-2"}, {"node-2"}, id="node"),
        pytest.param({"node_selector": {"disk": "data"}}, {"node-1", "node-3"}, id="selector"),
    ],
)
def test_locality_places_pods_where_the_data_is(params: dict[str, Any], expect: set[str]) -> None:
    labels = {"node-1": {"disk": "data"}, "node-3": {"disk": "data"}}
    sim = Sim(nodes=4, labels=labels)
    esl = Locality(sim.backend, LocalityParams(name="ds", **params))
    esl.apply()
    assert set(sim.place_all(esl.requests_for(), 6)) == expect


def test_locality_slots_bound_the_pods_per_data_node() -> None:
    sim = Sim(nodes=4)
    esl = Locality(sim.backend, LocalityParams(name="ds", node="node-2", slots=2))
    esl.apply()
    assert sim.place_all(esl.requests_for(), 3) == ["node-2", "node-2", None]


def test_locality_on_an_unknown_node_is_the_backends_refusal() -> None:
    sim = Sim()
    esl = Locality(sim.backend, LocalityParams(name="ds", node="nope"))
    with pytest.raises(UnknownNode) as e:
        esl.apply()
    assert (e.value.nodes, e.value.field) == (["nope"], "node")
    assert esl.resources() == []


# ---- bin-packing ---------------------------------------------------------------------------


@pytest.mark.parametrize("in_path", [False, True], ids=["pure", "extender"])
def test_binpack_uses_the_fewest_nodes(in_path: bool) -> None:
    sim = Sim(nodes=4, cpu=4, in_path=in_path)
    esl = BinPack(sim.backend, BinPackParams(name="b", cpu="2"))
    esl.apply()
    placed = []
    for _ in range(5):
        node = sim.place(esl.requests_for())
        if node is None:  # pure approach: the set is full, grow it by one node
            assert not in_path and esl.step()
            node = sim.place(esl.requests_for())
        placed.append(node)
    assert sorted(Counter(placed).values()) == [1, 2, 2]  # 5 pods of 2 cpu: 3 nodes of 4
    req = esl.requests_for()
    assert req.annotations == ({f"{D}/pack": "pack-b"} if in_path else {})
    # Extender: the resource is everywhere and prioritize packs; pure: the set grew to 3.
    assert len(esl.where(esl.short())) == (4 if in_path else 3)
    esl.teardown()
    assert sim.ours() == set()


def test_binpack_grows_only_when_the_set_is_full() -> None:
    sim = Sim(nodes=3, cpu=4)
    sim.busy("node-2", 1)  # the fullest node with room is where the set starts
    esl = BinPack(sim.backend, BinPackParams(name="b", cpu="2", memory="1Gi"))
    esl.apply()
    assert list(esl.where(esl.short())) == ["node-2"]
    assert esl.requests_for().limits == {f"{D}/pack-b": "1", "cpu": "2", "memory": "1Gi"}
    assert esl.step() == []  # node-2 has room for one pod
    assert sim.place(esl.requests_for()) == "node-2"
    (change,) = esl.step()  # node-2 is full: the set grows by the fullest node with room
    assert change.nodes == {"node-0": UNBOUNDED}
    assert change.why == "every node of the set is full"
    assert esl.step() == []  # node-0 has room
