"""The gang ESL (extender.esl.gang) on both approaches, against the simulated cluster (eslsim):
in the extender's path it creates nothing and its pods declare the gang to the extender's gang
feature; in the pure approach it plans a per-gang resource from the cluster state, and `step`
re-plans the members not placed after `attempt_seconds`, with backoff. A gang that can never
fit is Unsatisfiable, one with no room now NoRoom, and nothing is created either way."""

from __future__ import annotations

import pytest
from builders import Clock, info
from eslsim import KEYS, D, Sim

from escher_harness.workload import pod_manifest
from extender.esl.base import Dynamic
from extender.esl.errors import InvalidParameters, NoRoom, Unsatisfiable
from extender.esl.gang import GangESL, GangParams, plan
from extender.esl.registry import build
from extender.gang.spec import GangSpec, gang_spec
from extender.policies.api import ClusterState, Usage

GI = 1 << 30
NEED = {"cpu": 1000, "memory": GI, "pods": 1}


def state(**nodes: tuple[int, int]) -> ClusterState:
    """nodes: name=(available cpu cores, capacity cpu cores); memory and pods plentiful."""
    return ClusterState(
        version=1,
        nodes={
            n: {
                "cpu": Usage(capacity=c * 1000, allocated=(c - a) * 1000, available=a * 1000),
                "memory": Usage(capacity=1 << 40, allocated=0, available=1 << 40),
                "pods": Usage(capacity=110, allocated=0, available=110),
            }
            for n, (a, c) in nodes.items()
        },
    )


@pytest.mark.parametrize(
    ("nodes", "members", "use", "expected"),
    [
        pytest.param({"a": (4, 4), "b": (2, 4)}, 5, "available", {"a": 4, "b": 1}, id="most-room"),
        pytest.param({"a": (4, 4), "b": (2, 4)}, 7, "available", {}, id="no-room-now"),
        pytest.param({"a": (4, 4), "b": (2, 4)}, 7, "capacity", {"a": 4, "b": 3}, id="empty"),
        pytest.param({"a": (2, 4), "b": (2, 4)}, 3, "available", {"a": 2, "b": 1}, id="by-name"),
        pytest.param({"a": (0, 4)}, 1, "available", {}, id="full"),
    ],
)
def test_plan(
    nodes: dict[str, tuple[int, int]], members: int, use: str, expected: dict[str, int]
) -> None:
    assert plan(state(**nodes), members, NEED, use) == expected


def gang(sim: Sim, clock: Clock | None = None, **params: object) -> GangESL:
    data = {"name": "g", "members": 4, "attempt_seconds": 10, **params}
    return GangESL(sim.backend, GangParams.model_validate(data), clock=clock or Clock())


# ---- the extender's approach ----------------------------------------------------------------


def test_in_the_extenders_path_the_pods_declare_the_gang_to_its_gang_feature() -> None:
    sim = Sim(nodes=2, in_path=True)
    esl = gang(sim, members=3, cpu="500m", memory="2Gi", timeout_seconds=90)
    esl.apply()
    assert esl.resources() == [] and sim.ours() == set()  # nothing to create
    req = esl.requests_for()
    assert req.limits == {"cpu": "500m", "memory": "2Gi"}
    assert req.labels == {f"{D}/gang": "g"}
    assert req.annotations == {f"{D}/gang-min": "3", f"{D}/gang-timeout": "90"}
    # What the extender's gang feature reads of such a pod.
    manifest = pod_manifest(
        "g-0", limits=req.limits, labels=req.labels, annotations=req.annotations
    )
    assert gang_spec(info(manifest), KEYS) == GangSpec("default", "g", 3, 90.0)
    assert isinstance(esl, Dynamic) and esl.step() == []
    esl.teardown()


def test_in_the_extenders_path_a_full_cluster_is_left_to_the_gang_feature() -> None:
    sim = Sim(nodes=2, cpu=4, in_path=True)
    sim.busy("node-0", 4)
    sim.busy("node-1", 4)
    gang(sim).apply()  # no room now: the gang feature's reservation waits for it
    assert sim.ours() == set()


# ---- the pure approach ----------------------------------------------------------------------


def test_pure_plans_a_resource_with_a_unit_per_member_where_they_fit() -> None:
    sim = Sim(nodes=3, cpu=4)
    sim.busy("node-0", 1)
    esl = gang(sim, members=6)
    esl.apply()
    assert sim.capacities(f"{D}/gang-g") == {"node-1": 4, "node-2": 2}  # most room first
    req = esl.requests_for()
    assert req.limits == {f"{D}/gang-g": "1", "cpu": "1", "memory": "1Gi"}
    assert req.labels == {} and req.annotations == {}
    placed = sim.place_all(req, 7)
    assert sorted(n for n in placed if n) == ["node-1"] * 4 + ["node-2"] * 2
    assert placed[-1] is None  # a unit per member: a seventh pod does not fit
    esl.apply()  # idempotent: not re-planned
    assert sim.capacities(f"{D}/gang-g") == {"node-1": 4, "node-2": 2}


def test_pure_re_plans_the_members_not_placed_after_the_attempt_with_backoff() -> None:
    sim, clock = Sim(nodes=3, cpu=4), Clock()
    esl = gang(sim, clock)
    esl.apply()
    assert sim.capacities(f"{D}/gang-g") == {"node-0": 4}
    sim.busy("node-0", 2)  # the race the paper admits: another pod takes half the room
    placed = sim.place_all(esl.requests_for(), 4)
    assert placed == ["node-0", "node-0", None, None]
    clock.advance(9.9)
    assert esl.step() == []  # the attempt has not timed out
    clock.advance(0.1)
    (change,) = esl.step()
    assert change.resource == f"{D}/gang-g"
    assert change.nodes == {"node-0": 2, "node-1": 2}  # held units stay, the rest moves
    assert change.why == "2 of 4 members not placed: re-planned"
    sim.busy("node-1", 4)  # taken again before the members were resubmitted
    assert sim.place_all(esl.requests_for(), 2) == [None, None]
    clock.advance(10)
    assert esl.step() == []  # backoff: the next attempt waits 10 s + 1 s
    clock.advance(1)
    (change,) = esl.step()
    assert change.nodes == {"node-0": 2, "node-1": 0, "node-2": 2}
    assert sim.place_all(esl.requests_for(), 2) == ["node-2", "node-2"]
    clock.advance(3600)
    assert esl.step() == []  # complete: nothing to re-plan
    esl.teardown()  # removed even while its members hold it: they keep running
    assert sim.ours() == set() and esl.resources() == []
    assert sorted(sim.where.values()) == ["node-0", "node-0", "node-2", "node-2"]


def test_pure_keeps_trying_while_there_is_no_room() -> None:
    sim, clock = Sim(nodes=2, cpu=4), Clock()
    esl = gang(sim, clock, members=4)
    esl.apply()
    sim.busy("node-0", 4)
    sim.busy("node-1", 2)
    clock.advance(10)
    assert esl.step() == []  # 4 missing, room for 2: no plan
    assert sim.capacities(f"{D}/gang-g") == {"node-0": 4}  # the old plan stands
    sim.ledger.release_all([p for p in list(sim.ledger.snapshot().holdings) if "busy" in p])
    clock.advance(10)
    assert esl.step() == []  # backoff: 10 s + 1 s since the last try
    clock.advance(1)
    (change,) = esl.step()  # room again: re-planned, here onto the same units
    assert change.nodes == {"node-0": 4}
    assert change.why == "4 of 4 members not placed: re-planned"
    assert sim.place_all(esl.requests_for(), 4) == ["node-0"] * 4


@pytest.mark.parametrize("in_path", [False, True], ids=["pure", "extender"])
def test_a_gang_that_can_never_fit_is_unsatisfiable(in_path: bool) -> None:
    sim = Sim(nodes=2, cpu=4, in_path=in_path)
    esl = gang(sim, members=3, cpu="3")
    with pytest.raises(Unsatisfiable) as e:
        esl.apply()
    assert e.value.field == "members"
    assert str(e.value) == (
        "gang g: 3 members of cpu 3, memory 1Gi can never fit the cluster's nodes"
    )
    assert sim.ours() == set()


def test_pure_a_gang_with_no_room_now_is_no_room() -> None:
    sim = Sim(nodes=2, cpu=4)
    sim.busy("node-0", 3)
    esl = gang(sim, members=6)
    with pytest.raises(NoRoom) as e:
        esl.apply()
    assert (str(e.value), e.value.field) == ("gang g does not fit now", "members")
    assert sim.ours() == set() and esl.resources() == []


@pytest.mark.parametrize(
    ("in_path", "resources"),
    [pytest.param(False, [f"{D}/gang-g"], id="pure"), pytest.param(True, [], id="extender")],
)
def test_the_registry_builds_it(in_path: bool, resources: list[str]) -> None:
    sim = Sim(in_path=in_path)
    esl = build("gang", {"name": "g", "members": 2}, sim.backend)
    assert isinstance(esl, GangESL)
    esl.apply()
    assert esl.resources() == resources


# ---- topology -------------------------------------------------------------------------------

RACK = "topology.kubernetes.io/rack"
# node-0, node-1 in rack r1; node-2, node-3 in r2; node-4 in none.
RACKS = {f"node-{i}": {RACK: r} for i, r in enumerate(["r1", "r1", "r2", "r2"])}


def test_pure_required_topology_puts_every_unit_in_one_rack_the_best_fit() -> None:
    sim = Sim(nodes=5, cpu=4, labels=RACKS)
    sim.busy("node-0", 2)  # r1 has 6 free, r2 8, the unlabelled node 4
    esl = gang(sim, members=5, required_topology="rack")
    esl.apply()
    assert sim.capacities(f"{D}/gang-g") == {"node-0": 1, "node-1": 4}  # r1: least room
    esl.teardown()
    esl = gang(sim, members=7, required_topology=RACK)  # by label key too
    esl.apply()
    assert sim.capacities(f"{D}/gang-g") == {"node-2": 4, "node-3": 3}


def test_pure_re_plan_stays_in_the_rack_its_members_hold() -> None:
    sim, clock = Sim(nodes=4, cpu=4, labels=RACKS), Clock()
    esl = gang(sim, clock, members=4, required_topology="rack")
    esl.apply()
    assert sim.capacities(f"{D}/gang-g") == {"node-0": 4}  # both racks fit: by name
    sim.busy("node-0", 2)
    assert sim.place_all(esl.requests_for(), 4) == ["node-0", "node-0", None, None]
    clock.advance(10)
    (change,) = esl.step()
    assert change.nodes == {"node-0": 2, "node-1": 2}  # r1 still, though r2 is emptier
    sim.busy("node-1", 4)
    clock.advance(11)
    assert esl.step() == []  # r1 is full: r2's room is no use to this gang
    assert sim.capacities(f"{D}/gang-g") == {"node-0": 2, "node-1": 2}


def test_pure_re_plan_of_a_gang_holding_nothing_may_move_rack() -> None:
    sim, clock = Sim(nodes=4, cpu=4, labels=RACKS), Clock()
    esl = gang(sim, clock, members=4, required_topology="rack")
    esl.apply()
    sim.busy("node-0", 4)
    sim.busy("node-1", 4)
    clock.advance(10)
    (change,) = esl.step()
    assert change.nodes == {"node-0": 0, "node-2": 4}


@pytest.mark.parametrize("in_path", [False, True], ids=["pure", "extender"])
def test_a_gang_no_rack_can_ever_hold_is_unsatisfiable_naming_the_largest(in_path: bool) -> None:
    sim = Sim(nodes=5, cpu=4, labels=RACKS, in_path=in_path)
    esl = gang(sim, members=9, required_topology="rack")
    with pytest.raises(Unsatisfiable) as e:
        esl.apply()
    assert e.value.field == "required_topology"
    assert str(e.value) == "gang g: no rack can ever hold 9 members: the largest holds 8 (rack r1)"
    assert sim.ours() == set()


def test_pure_no_rack_with_room_now_is_no_room_naming_the_most() -> None:
    sim = Sim(nodes=4, cpu=4, labels=RACKS)
    sim.busy("node-0", 1)
    sim.busy("node-2", 2)
    with pytest.raises(NoRoom) as e:
        gang(sim, members=8, required_topology="rack").apply()
    assert e.value.field == "required_topology"
    assert str(e.value) == (
        "gang g does not fit now: no rack has room for 8 members now: the most is 7 (rack r1)"
    )
    assert sim.ours() == set()


def test_pure_preferred_topology_spans_the_fewest_racks() -> None:
    sim = Sim(nodes=4, cpu=4, labels=RACKS)
    sim.busy("node-0", 1)
    esl = gang(sim, members=8, preferred_topology="rack")
    esl.apply()
    assert sim.capacities(f"{D}/gang-g") == {"node-2": 4, "node-3": 4}


def test_in_the_extenders_path_the_pods_carry_the_topology_as_given() -> None:
    sim = Sim(nodes=4, labels=RACKS, in_path=True)
    esl = gang(sim, required_topology="rack", preferred_topology="kubernetes.io/hostname")
    esl.apply()
    assert esl.requests_for().annotations == {
        f"{D}/gang-min": "4",
        f"{D}/gang-timeout": "60",
        f"{D}/gang-required-topology": "rack",
        f"{D}/gang-preferred-topology": "kubernetes.io/hostname",
    }


@pytest.mark.parametrize("field", ["required_topology", "preferred_topology"])
def test_an_unknown_level_is_refused_naming_the_field(field: str) -> None:
    sim = Sim(labels=RACKS)
    with pytest.raises(InvalidParameters) as e:
        build("gang", {"name": "g", "members": 2, field: "shelf"}, sim.backend)
    assert e.value.field == field
    assert str(e.value).startswith(f"{field}: 'shelf' is neither a topology level (zone (")
    assert sim.ours() == set()
