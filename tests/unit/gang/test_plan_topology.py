"""Planning a gang under a Placement (extender.gang.plan, extender.gang.topology): one domain
of a required level (best fit), as few domains of a preferred one as the gang fits in, nodes
packed domain by domain, and the reasons given when the gang does not fit."""

from __future__ import annotations

import pytest

from extender.core.ledger import NodeView
from extender.gang import topology
from extender.gang.plan import Planned, Unplaced, Want, plan
from extender.gang.topology import Placement

CPU = "cpu"
LEVELS = topology.parse(topology.DEFAULT)
ZONE, BLOCK, RACK, HOST = LEVELS.levels


def node(name: str, cpu: int, rack: str | None = None, zone: str = "z0", used: int = 0) -> NodeView:
    labels = {ZONE.key: zone, HOST.key: name}
    if rack is not None:
        labels[RACK.key] = rack
    return NodeView(name, labels, physical={CPU: cpu}, used={CPU: used})


def gang(n: int, cpu: int = 1) -> list[Want]:
    amounts = {CPU: cpu}
    return [Want(f"m{i:02}", amounts) for i in range(n)]


def where(result: Planned | Unplaced) -> dict[str, int]:
    """Node -> members placed there."""
    assert isinstance(result, Planned), result
    out: dict[str, int] = {}
    for name in result.places.values():
        out[name] = out.get(name, 0) + 1
    return out


# Racks of 8, 4 and 6 (a node of r0 partly used), and a node without a rack.
RACKS = [
    node("a0", 4, "r0"),
    node("b0", 4, "r1"),
    node("a1", 6, "r0", used=2),
    node("c0", 6, "r2"),
    node("x", 100),
]

REQUIRED = {
    # The fullest domain the gang fits in: large ones stay whole for large gangs.
    "best fit, the smallest": (4, {"b0": 4}),
    "best fit, the next": (5, {"c0": 5}),
    "one domain, however spread": (7, {"a0": 4, "a1": 3}),
    "the exact fit of the largest": (8, {"a0": 4, "a1": 4}),
}


@pytest.mark.parametrize(("n", "placed"), REQUIRED.values(), ids=REQUIRED.keys())
def test_a_required_level_takes_the_best_fitting_domain(n: int, placed: dict[str, int]) -> None:
    result = plan(gang(n), RACKS, "escher.io/", placement=Placement(required=RACK))
    assert where(result) == placed
    assert isinstance(result, Planned) and result.domains == 1


UNPLACED = {
    # Nodes without the label are not used, however large.
    "no rack takes the gang": (
        RACKS,
        9,
        False,
        "no rack has room for 9 member(s) of cpu=1: the largest takes 8 (rack r0)",
    ),
    "on capacity alone": (
        RACKS,
        11,
        True,
        "no rack has room for 11 member(s) of cpu=1, even empty: the largest takes 10 (rack r0)",
    ),
    "no node has the label": (
        [node("x", 100)],
        1,
        False,
        "no rack has room for 1 member(s) of cpu=1: no node has topology.kubernetes.io/rack",
    ),
}


@pytest.mark.parametrize(("nodes", "n", "empty", "reason"), UNPLACED.values(), ids=UNPLACED.keys())
def test_a_gang_no_domain_takes_says_which_comes_closest(
    nodes: list[NodeView], n: int, empty: bool, reason: str
) -> None:
    result = plan(gang(n), nodes, "escher.io/", empty, placement=Placement(required=RACK))
    assert result == Unplaced(reason)


# Racks taking 5, 3 and 2 members of one cpu, 20 on nodes without a rack.
SPREAD = [
    node("p0", 3, "r0"),
    node("q0", 3, "r1"),
    node("p1", 2, "r0"),
    node("s0", 2, "r2"),
    node("x", 20),
]

PREFERRED = {
    # One rack takes all: the one it fits best.
    "one rack, the best fit": (3, {"q0": 3}, 1),
    "one rack, the only one": (5, {"p0": 3, "p1": 2}, 1),
    # The largest, then the smallest rack that takes the rest (r2, not r1).
    "two racks, the last the smallest": (7, {"p0": 3, "p1": 2, "s0": 2}, 2),
    "two racks, the rest needs the larger": (8, {"p0": 3, "p1": 2, "q0": 3}, 2),
    # Every rack, then the nodes without one: a preference never refuses a gang.
    "every rack, then the rest": (12, {"p0": 3, "p1": 2, "q0": 3, "s0": 2, "x": 2}, 3),
}


@pytest.mark.parametrize(("n", "placed", "domains"), PREFERRED.values(), ids=PREFERRED.keys())
def test_a_preferred_level_spans_as_few_domains_as_it_can(
    n: int, placed: dict[str, int], domains: int
) -> None:
    result = plan(gang(n), SPREAD, "escher.io/", placement=Placement(preferred=RACK))
    assert where(result) == placed
    assert isinstance(result, Planned) and result.domains == domains


def test_preferred_inside_required() -> None:
    nodes = [
        node("a", 4, "r0", zone="z0"),
        node("b", 2, "r1", zone="z1"),
        node("c", 2, "r2", zone="z1"),
        node("d", 3, "r3", zone="z1"),
    ]
    placement = Placement(required=ZONE, preferred=RACK)
    # z0 takes 4, z1 7: 4 fit z0 best, in one rack.
    result = plan(gang(4), nodes, "escher.io/", placement=placement)
    assert where(result) == {"a": 4}
    assert isinstance(result, Planned) and result.domains == 1
    # 5 only fit z1, in two racks of it: the largest and the smallest that takes the rest.
    result = plan(gang(5), nodes, "escher.io/", placement=placement)
    assert where(result) == {"d": 3, "b": 2}
    assert isinstance(result, Planned) and result.domains == 2


def test_packing_fills_domain_by_domain_in_the_order_of_their_first_node() -> None:
    nodes = [
        node("r1-a", 1, "r1"),
        node("r0-a", 1, "r0"),
        node("r1-b", 1, "r1"),
        node("none", 1),
        node("r0-b", 1, "r0"),
    ]
    packed = Placement(pack=LEVELS.levels)
    assert where(plan(gang(2), nodes, "escher.io/")) == {"r1-a": 1, "r0-a": 1}
    assert where(plan(gang(2), nodes, "escher.io/", placement=packed)) == {"r1-a": 1, "r1-b": 1}
    assert where(plan(gang(4), nodes, "escher.io/", placement=packed)) == {
        "r1-a": 1,
        "r1-b": 1,
        "r0-a": 1,
        "r0-b": 1,
    }
    # Nodes without the label come last.
    assert where(plan(gang(5), nodes, "escher.io/", placement=packed))["none"] == 1


def test_the_asking_member_stays_among_its_candidates_when_packed() -> None:
    nodes = [node("offered", 1, "r1"), node("r0-a", 4, "r0"), node("r1-b", 4, "r1")]
    wants = [Want("asking", {CPU: 1}, candidates=frozenset({"offered"})), *gang(3)]
    result = plan(wants, nodes, "escher.io/", placement=Placement(pack=LEVELS.levels))
    assert isinstance(result, Planned)
    assert result.places["asking"] == "offered"
    assert where(result) == {"offered": 1, "r1-b": 3}


def test_a_gang_that_does_not_fit_anywhere_says_how_many_fit() -> None:
    assert plan(gang(3, cpu=2), [node("a", 5)], "escher.io/") == Unplaced(
        "only 2 of 3 member(s) of cpu=2 fit the nodes they may use"
    )
    # Members of several shapes: no shape named.
    wants = [Want("a", {CPU: 2}), Want("b", {CPU: 4})]
    assert plan(wants, [node("a", 5)], "escher.io/", empty=True) == Unplaced(
        "only 1 of 2 member(s) fit the nodes they may use, even empty"
    )


def test_no_wants_are_planned_at_once() -> None:
    assert plan([], [], "escher.io/", placement=Placement(required=RACK)) == Planned({})


# The e2e layout of tests/e2e/test_gang_topology.py: racks of two 4-cpu nodes, members of 2
# cpu; r0 full, r1 with room for 3 (a node half used), r2 for 4. The asking member may go
# only where kube-scheduler offered it (a class of its own, the same shape as the rest).
SPILL = [
    node("n0", 4, "r0", used=4),
    node("n1", 4, "r0", used=4),
    node("n2", 4, "r1", used=2),
    node("n3", 4, "r1"),
    node("n4", 4, "r2"),
    node("n5", 4, "r2"),
]
OFFERED = frozenset({"n2", "n3", "n4", "n5"})
SHARED = {
    # Counted alone, each class claimed r1's 3 places (3 of the rest + the asker = 4): r1
    # looked whole and, fuller, was chosen; the gang spanned two racks.
    "asker offered everywhere free": (OFFERED, "r2"),
    "asker offered r2 only": (frozenset({"n4", "n5"}), "r2"),
    # The asker pinned to r1: r2 still takes the gang whole but the asker must go to r1.
    "asker offered r1 only": (frozenset({"n2", "n3"}), None),
}


@pytest.mark.parametrize(("offered", "rack"), SHARED.values(), ids=SHARED.keys())
def test_classes_of_one_shape_share_a_domains_room(
    offered: frozenset[str], rack: str | None
) -> None:
    amounts = {CPU: 2}
    wants = [Want("m00", amounts, candidates=offered)]
    wants += [Want(f"m{i:02}", amounts) for i in range(1, 4)]
    result = plan(wants, SPILL, "escher.io/", placement=Placement(preferred=RACK))
    racks = {next(v.labels[RACK.key] for v in SPILL if v.name == n) for n in where(result)}
    if rack is not None:
        assert racks == {rack}, result
    else:  # two racks at least, the asker in r1
        assert isinstance(result, Planned) and result.places["m00"] in {"n2", "n3"}, result
