"""Properties of gang planning (extender.gang.plan) on small random clusters and gangs: all or
nothing, no node over capacity, the same places as a plain first-fit one member at a time,
whatever order the members come in, one domain when one is required and as few as there can
be when one is preferred (against brute force)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.core.constraints import Constraints
from extender.core.ledger import NodeView
from extender.gang import topology
from extender.gang.plan import Planned, Unplaced, Want, plan
from extender.gang.topology import Placement

PREFIX = "escher.io/"
EPH = PREFIX + "x"
RESOURCES = ("cpu", "memory", EPH)
RACK = topology.parse(topology.DEFAULT).resolve("rack")
assert RACK is not None
DISK = "example.com/disk"


@st.composite
def clusters(draw: st.DrawFn) -> list[NodeView]:
    nodes = []
    for i in range(draw(st.integers(1, 7))):
        labels = {"kubernetes.io/hostname": f"n{i}"}
        rack = draw(st.sampled_from([None, "r0", "r1", "r2"]))
        if rack is not None:
            labels[RACK.key] = rack
        if draw(st.booleans()):
            labels[DISK] = "ssd"
        caps = {r: draw(st.integers(0, 6)) for r in RESOURCES}
        # Used may exceed capacity: an observed fact the ledger records.
        used = {r: draw(st.integers(0, 7)) for r in RESOURCES}
        nodes.append(
            NodeView(
                f"n{i}",
                labels,
                physical={"cpu": caps["cpu"], "memory": caps["memory"]},
                ephemeral={EPH: caps[EPH]},
                used=used,
            )
        )
    return nodes


@st.composite
def shapes(draw: st.DrawFn, names: list[str]) -> Want:
    """A want standing for a class: its amounts, constraints, candidates and exclusions."""
    amounts = {r: draw(st.integers(0, 3)) for r in RESOURCES}
    constraints = Constraints({DISK: "ssd"}, None, (), "") if draw(st.booleans()) else None
    subsets = st.frozensets(st.sampled_from(names))
    candidates = draw(st.none() | subsets)
    excluded = draw(st.just(frozenset()) | subsets)
    return Want("", amounts, constraints, candidates, excluded)


@st.composite
def gangs(draw: st.DrawFn, nodes: list[NodeView], most: int = 3) -> list[Want]:
    names = [v.name for v in nodes]
    kinds = draw(st.lists(shapes(names), min_size=1, max_size=most))
    wants = []
    for i in range(draw(st.integers(1, 10))):
        k = draw(st.sampled_from(kinds))
        # Members built apart have equal but distinct parts: they still form one class.
        if draw(st.booleans()):
            k = Want(
                "",
                dict(k.amounts),
                None if k.constraints is None else Constraints({DISK: "ssd"}, None, (), ""),
                None if k.candidates is None else frozenset(k.candidates),
                frozenset(k.excluded),
            )
        wants.append(Want(f"m{i}", k.amounts, k.constraints, k.candidates, k.excluded))
    return wants


def free(view: NodeView, empty: bool) -> dict[str, int]:
    caps = {**view.physical, **view.ephemeral}
    return {r: caps.get(r, 0) - (0 if empty else view.used.get(r, 0)) for r in RESOURCES}


def fits(amounts: Mapping[str, int], room: Mapping[str, int]) -> bool:
    return all(room[r] >= v for r, v in amounts.items() if v > 0)


def reference(wants: list[Want], nodes: list[NodeView], empty: bool) -> dict[str, str] | None:
    """First-fit one member at a time: the classes the planner documents (fewest nodes to
    choose from, then largest, then by ref), each member to the first node with room."""

    def key(w: Want) -> tuple[object, ...]:
        choice = (
            64
            if w.constraints is None and w.candidates is None and not w.excluded
            else sum(w.allows(v) for v in nodes)
        )
        candidates = None if w.candidates is None else sorted(w.candidates)
        shape = (sorted(w.amounts.items()), repr(w.constraints), candidates, sorted(w.excluded))
        return (choice, -w.amounts.get("cpu", 0), -w.amounts.get("memory", 0), repr(shape))

    first: dict[str, str] = {}  # class -> its smallest ref
    for w in sorted(wants, key=lambda w: w.ref):
        first.setdefault(key(w)[3], w.ref)
    order = sorted(wants, key=lambda w: (*key(w)[:3], first[key(w)[3]], w.ref))
    room = {v.name: free(v, empty) for v in nodes}
    places = {}
    for w in order:
        for v in nodes:
            if w.allows(v) and fits(w.amounts, room[v.name]):
                for r, a in w.amounts.items():
                    room[v.name][r] -= max(a, 0)
                places[w.ref] = v.name
                break
        else:
            return None
    return places


def places(result: Planned | Unplaced) -> dict[str, str] | None:
    return result.places if isinstance(result, Planned) else None


def check(
    result: Planned | Unplaced, wants: list[Want], nodes: list[NodeView], empty: bool
) -> None:
    """All or nothing, each on a node it may use, no node over what it has free."""
    if isinstance(result, Unplaced):
        assert result.reason
        return
    assert set(result.places) == {w.ref for w in wants}
    views = {v.name: v for v in nodes}
    for w in wants:
        assert w.allows(views[result.places[w.ref]])
    for v in nodes:
        took = [w.amounts for w in wants if result.places[w.ref] == v.name]
        for r, room in free(v, empty).items():
            taken = sum(max(a.get(r, 0), 0) for a in took)
            assert taken == 0 or taken <= room, (v.name, r)


def cluster_and_gang(most: int = 3) -> st.SearchStrategy[tuple[list[NodeView], list[Want]]]:
    return clusters().flatmap(lambda nodes: st.tuples(st.just(nodes), gangs(nodes, most)))


@settings(max_examples=100, deadline=None)
@given(cluster_and_gang(), st.booleans(), st.randoms(use_true_random=False))
def test_plans_as_first_fit_one_member_at_a_time(
    case: tuple[list[NodeView], list[Want]], empty: bool, rng: random.Random
) -> None:
    nodes, wants = case
    result = plan(wants, nodes, PREFIX, empty)
    check(result, wants, nodes, empty)
    expected = reference(wants, nodes, empty)
    assert places(result) == expected
    # Whatever order the members come in, and however often.
    shuffled = list(wants)
    rng.shuffle(shuffled)
    assert plan(shuffled, nodes, PREFIX, empty) == result


@settings(max_examples=60, deadline=None)
@given(cluster_and_gang())
def test_empty_plans_against_capacity_alone(case: tuple[list[NodeView], list[Want]]) -> None:
    nodes, wants = case
    bare = [v._replace(used={}) for v in nodes]
    assert places(plan(wants, nodes, PREFIX, empty=True)) == places(plan(wants, bare, PREFIX))


@settings(max_examples=100, deadline=None)
@given(cluster_and_gang(), st.booleans())
def test_a_required_level_keeps_the_gang_in_one_domain(
    case: tuple[list[NodeView], list[Want]], empty: bool
) -> None:
    nodes, wants = case
    result = plan(wants, nodes, PREFIX, empty, placement=Placement(required=RACK))
    check(result, wants, nodes, empty)
    racks = {v.labels.get(RACK.key) for v in nodes} - {None}
    fitting = {
        r
        for r in racks
        if reference(wants, [v for v in nodes if v.labels.get(RACK.key) == r], empty) is not None
    }
    if isinstance(result, Unplaced):
        assert not fitting
        return
    views = {v.name: v for v in nodes}
    used = {views[n].labels.get(RACK.key) for n in result.places.values()}
    assert len(used) == 1 and used <= fitting
    assert result.domains == 1


def capacity(w: Want, nodes: list[NodeView], count: int, empty: bool) -> int:
    """How many members like `w` the nodes could take (one class: exact)."""
    total = 0
    for v in nodes:
        if w.allows(v):
            room = free(v, empty)
            parts = [room[r] // a for r, a in w.amounts.items() if a > 0]
            total += max(0, min(parts)) if parts else count
    return total


@st.composite
def racks(draw: st.DrawFn) -> tuple[list[NodeView], list[Want]]:
    """Nodes of cpu alone in up to four racks, mostly with room: domains to choose between;
    a gang of one class."""
    nodes = []
    for i in range(draw(st.integers(1, 9))):
        rack = draw(st.sampled_from([None, "r0", "r1", "r2", "r3", "r3"]))
        labels = {} if rack is None else {RACK.key: rack}
        cpu = draw(st.integers(0, 4))
        used = {"cpu": draw(st.integers(0, 2))}
        nodes.append(NodeView(f"n{i}", labels, physical={"cpu": cpu}, used=used))
    amounts = {"cpu": draw(st.integers(1, 2))}
    return nodes, [Want(f"m{i:02}", amounts) for i in range(draw(st.integers(1, 12)))]


@settings(max_examples=200, deadline=None)
@given(racks() | cluster_and_gang(most=1), st.booleans())
def test_one_class_takes_the_best_fit_and_the_fewest_domains(
    case: tuple[list[NodeView], list[Want]], empty: bool
) -> None:
    nodes, wants = case
    n, w = len(wants), wants[0]
    domains = {
        r: [v for v in nodes if v.labels.get(RACK.key) == r] for r in ("r0", "r1", "r2", "r3")
    }
    caps = {r: capacity(w, vs, n, empty) for r, vs in domains.items() if vs}
    views = {v.name: v for v in nodes}

    required = plan(wants, nodes, PREFIX, empty, placement=Placement(required=RACK))
    check(required, wants, nodes, empty)
    fitting = [c for c in caps.values() if c >= n]
    assert isinstance(required, Planned) == bool(fitting)
    if isinstance(required, Planned):
        (rack,) = {views[x].labels[RACK.key] for x in required.places.values()}
        assert caps[rack] == min(fitting)  # best fit

    preferred = plan(wants, nodes, PREFIX, empty, placement=Placement(preferred=RACK))
    check(preferred, wants, nodes, empty)
    # A preference never refuses a gang of one class that fits anywhere.
    assert isinstance(preferred, Planned) == (capacity(w, nodes, n, empty) >= n)
    if isinstance(preferred, Planned) and sum(caps.values()) >= n:
        fewest = min(
            k
            for k in range(len(caps) + 1)
            if any(sum(c) >= n for c in itertools.combinations(caps.values(), k))
        )
        assert preferred.domains == fewest
        spanned = {views[x].labels.get(RACK.key) for x in preferred.places.values()}
        assert len(spanned - {None}) == fewest and None not in spanned
