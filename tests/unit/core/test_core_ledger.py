"""The ledger: capacity invariants, atomic policy changes, holdings, the filter's index,
snapshots and totals."""

from __future__ import annotations

import contextlib
import gc
import random
import threading
from typing import Any

import pytest
from builders import walked
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.core.errors import Conflict, CoreError, UnknownNode
from extender.core.ledger import HolderKind, Ledger

R = "escher.io/r"
S = "escher.io/s"


def ledger(*nodes: str, cap: int = 0) -> Ledger:
    lg = Ledger("escher.io")
    for n in nodes:
        lg.upsert_node(n, {"zone": n[-1]}, {"cpu": 4000, "pods": 110})
    if cap:
        lg.set_capacity(R, dict.fromkeys(nodes, cap))
    return lg


@pytest.mark.parametrize(
    ("caps", "held", "offered", "fullest"),
    [
        ({"a": 4, "b": 4, "c": 4}, {"b": 2, "c": 1}, ["a", "b", "c"], "b"),
        # Equals: the first by name, whatever the order offered.
        ({"a": 4, "b": 4, "c": 4}, {"b": 1, "c": 1}, ["c", "a", "b"], "b"),
        ({"a": 4, "b": 4}, {}, ["b", "a"], "a"),
        # The fullest not offered (full, for a pod requesting it): the next one.
        ({"a": 2, "b": 4, "c": 4}, {"a": 2, "b": 1}, ["b", "c"], "b"),
        # Only the offered nodes that have it count.
        ({"a": 4, "b": 4}, {"b": 3}, ["a", "c"], "a"),
        ({"a": 4}, {"a": 1}, ["b", "c"], None),
        ({"a": 4}, {}, [], None),
        ({}, {}, ["a", "b"], None),
    ],
    ids=[
        "fullest",
        "tie",
        "none-used",
        "fullest-not-offered",
        "some-lack-it",
        "none-has-it",
        "none-offered",
        "unset",
    ],
)
def test_most_used(
    caps: dict[str, int], held: dict[str, int], offered: list[str], fullest: str | None
) -> None:
    """What a pack preference scores: the offered node with the most units in use."""
    lg = ledger("a", "b", "c")
    if caps:
        lg.set_capacity(R, caps)
    for node, units in held.items():
        assert lg.hold(f"p-{node}", node, {R: units}) is None
    assert lg.most_used(R, offered) == fullest


def _fullest(lg: Ledger, offered: list[str]) -> str | None:
    """most_used by its definition: a pass over the offered nodes' views."""
    used = {}
    for n in offered:
        view = lg.node(n)
        if view is not None and R in view.ephemeral:
            used[n] = view.used.get(R, 0)
    if not used:
        return None
    most = max(used.values())
    return min(n for n, u in used.items() if u == most)


NODES = [f"n{i:02d}" for i in range(12)]
_op = st.one_of(
    st.tuples(st.just("cap"), st.sampled_from(NODES), st.integers(0, 6)),
    st.tuples(st.just("hold"), st.sampled_from(NODES), st.integers(1, 3), st.integers(0, 9)),
    st.tuples(st.just("bound"), st.sampled_from(NODES), st.integers(1, 9), st.integers(0, 9)),
    st.tuples(st.just("release"), st.integers(0, 9)),
    st.tuples(st.just("remove"), st.sampled_from(NODES)),
    st.tuples(st.just("readd"), st.sampled_from(NODES)),
    st.tuples(st.just("drop"), st.booleans()),
)


@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(_op, max_size=40),
    asks=st.lists(st.lists(st.sampled_from(NODES), unique=True), min_size=1, max_size=4),
)
def test_most_used_ranking_follows_every_change(
    ops: list[tuple[Any, ...]], asks: list[list[str]]
) -> None:
    """The ranking most_used keeps (built on the first ask, then updated by every change,
    dropped with the resource) answers as a pass over the views does, after any sequence of
    capacity changes, holds, bound pods beyond capacity, releases, node removals and the
    resource's removal."""
    lg = ledger(*NODES, cap=2)
    assert lg.most_used(R, NODES) == "n00"  # builds the ranking
    for op in ops:
        kind = op[0]
        if kind == "cap":
            with contextlib.suppress(Conflict, UnknownNode):
                lg.set_capacity(R, {op[1]: op[2]})
        elif kind == "hold":
            lg.hold(f"p{op[3]}", op[1], {R: op[2]})
        elif kind == "bound":
            lg.observe_bound(f"p{op[3]}", op[1], {R: op[2]})
        elif kind == "release":
            lg.release(f"p{op[1]}")
        elif kind == "remove":
            lg.remove_node(op[1])
        elif kind == "readd":
            lg.upsert_node(op[1], {}, {"cpu": 4000})
        elif op[1]:  # "drop", forced: the holders keep running, the ledger forgets
            lg.remove_resource(R, force=True)
            assert R not in lg._index.ranks  # the ranking goes with the resource
        for offered in asks:
            assert lg.most_used(R, offered) == _fullest(lg, offered), (op, offered)


@pytest.mark.parametrize(
    ("cap", "held", "want", "fits", "unresolvable", "reason", "detail"),
    [
        (4, 0, 1, True, False, "", ""),
        (4, 3, 1, True, False, "", ""),
        (4, 4, 1, False, False, "Insufficient escher.io/r", "requested 1, available 0 of 4"),
        (4, 2, 3, False, False, "Insufficient escher.io/r", "requested 3, available 2 of 4"),
        (2, 0, 3, False, True, "Insufficient escher.io/r", "requested 3, available 2 of 2"),
        (0, 0, 1, False, True, "node(s) lack escher.io/r", "requested 1, available 0 of 0"),
    ],
)
def test_shortfalls(
    cap: int, held: int, want: int, fits: bool, unresolvable: bool, reason: str, detail: str
) -> None:
    lg = ledger("a")
    if cap:
        lg.set_capacity(R, {"a": cap})
    if held:
        assert lg.hold("p0", "a", {R: held}) is None
    out = lg.shortfalls(["a"], {R: want})
    assert ("a" not in out) is fits
    if not fits:
        assert str(out["a"]) == reason
        assert out["a"].detail == f"a: escher.io/r {detail}"
        assert out["a"].unresolvable is unresolvable


def test_unknown_node_has_nothing() -> None:
    lg = ledger("a", cap=1)
    assert str(lg.shortfalls(["zz"], {R: 1})["zz"]) == "node(s) lack escher.io/r"
    assert lg.hold("p", "zz", {R: 1}) is not None


def test_hold_never_exceeds_capacity_and_release_frees() -> None:
    lg = ledger("a", cap=2)
    assert lg.hold("p1", "a", {R: 1}) is None
    assert lg.hold("p2", "a", {R: 1}) is None
    short = lg.hold("p3", "a", {R: 1})
    assert short is not None and short.available == 0
    assert lg.release("p1")
    assert not lg.release("p1")
    assert lg.hold("p3", "a", {R: 1}) is None
    assert lg.node("a").used[R] == 2  # type: ignore[union-attr]


def test_hold_is_idempotent_and_moves() -> None:
    lg = ledger("a", "b", cap=1)
    assert lg.hold("p", "a", {R: 1}) is None
    assert lg.hold("p", "a", {R: 1}) is None  # same place again: still one unit
    assert lg.node("a").used == {R: 1}  # type: ignore[union-attr]
    assert lg.hold("p", "b", {R: 1}) is None  # moving releases a
    assert lg.node("a").used == {}  # type: ignore[union-attr]
    assert lg.node("b").used == {R: 1}  # type: ignore[union-attr]


def test_hold_counts_but_does_not_check_physical() -> None:
    lg = ledger("a", cap=1)
    assert lg.hold("p", "a", {R: 1, "cpu": 999_999}) is None
    assert lg.node("a").used["cpu"] == 999_999  # type: ignore[union-attr]


def test_observe_bound_is_a_fact_even_over_capacity_and_blocks_more() -> None:
    lg = ledger("a", cap=1)
    lg.observe_bound("p1", "a", {R: 1})
    lg.observe_bound("p2", "a", {R: 1})  # plain kube-scheduler placed it: recorded
    assert lg.node("a").used[R] == 2  # type: ignore[union-attr]
    assert lg.hold("p3", "a", {R: 1}) is not None


def test_assumed_becomes_bound_without_double_counting() -> None:
    lg = ledger("a", cap=2)
    assert lg.hold("p", "a", {R: 1}) is None
    lg.observe_bound("p", "a", {R: 1})
    assert lg.holding("p").kind is HolderKind.POD  # type: ignore[union-attr]
    assert lg.node("a").used[R] == 1  # type: ignore[union-attr]


def test_set_capacity_is_atomic() -> None:
    lg = ledger("a", "b", cap=2)
    lg.hold("p", "a", {R: 2})
    v = lg.version
    with pytest.raises(Conflict) as e:
        lg.set_capacity(R, {"a": 1, "b": 5})
    assert "a: escher.io/r capacity 1 is below the 2 already allocated" in str(e.value)
    with pytest.raises(UnknownNode):
        lg.set_capacity(R, {"b": 5, "zz": 1})
    with pytest.raises(CoreError):
        lg.set_capacity("example.com/x", {"a": 1})
    assert lg.version == v
    assert lg.node("b").ephemeral == {R: 2}  # type: ignore[union-attr]


def test_capacity_zero_removes_even_when_held() -> None:
    lg = ledger("a", cap=2)
    lg.hold("p", "a", {R: 1})
    lg.set_capacity(R, {"a": 0})
    assert R not in lg.node("a").ephemeral  # type: ignore[union-attr]
    assert lg.hold("q", "a", {R: 1}) is not None


def test_remove_resource_and_release_all() -> None:
    lg = ledger("a", "b", cap=3)
    lg.set_capacity(S, {"a": 1})
    assert sorted(lg.remove_resource(R)) == ["a", "b"]
    assert lg.remove_resource(R) == []
    assert lg.has_resource(S) and not lg.has_resource(R)
    assert lg.reserve([("g1-0", "a", {S: 1}), ("g1-1", "b", {"cpu": 1000})]) is None
    assert lg.reserved_nodes() == {"a": 1, "b": 1}
    assert lg.release_all(["g1-0", "g1-1", "g1-0", "nobody"]) == 2  # a repeat counts once
    assert lg.node("a").used == {} and lg.reserved_nodes() == {}  # type: ignore[union-attr]


def test_a_held_resource_is_removed_only_by_force() -> None:
    lg = ledger("a", "b", cap=2)
    lg.hold("p", "a", {R: 1})
    v = lg.version
    with pytest.raises(Conflict, match="held on 1 node"):
        lg.remove_resource(R)
    assert lg.version == v and lg.node("a").ephemeral == {R: 2}  # type: ignore[union-attr]
    assert sorted(lg.remove_resource(R, force=True)) == ["a", "b"]
    assert lg.holding("p") is not None  # the pod keeps running: its holding stays counted


def test_listener_sees_capacity_changes_with_versions() -> None:
    lg = ledger("a", "b")
    seen: list[tuple[int, frozenset[str]]] = []
    lg.subscribe(lambda v, nodes: seen.append((v, nodes)))
    lg.set_capacity(R, {"a": 1, "b": 1})
    lg.set_capacity(R, {"a": 1, "b": 2})  # a unchanged
    lg.hold("p", "a", {R: 1})
    assert [n for _, n in seen] == [frozenset({"a", "b"}), frozenset({"b"}), frozenset()]
    assert [v for v, _ in seen] == sorted(v for v, _ in seen)
    assert seen[-1][0] == lg.version


def test_rebuild_ephemeral_from_nodes() -> None:
    lg = Ledger("escher.io")
    lg.upsert_node("a", {}, {"cpu": 1000}, {R: 3})
    assert lg.node("a").ephemeral == {R: 3}  # type: ignore[union-attr]
    lg.upsert_node("a", {"x": "y"}, {"cpu": 2000})  # a watch update keeps the ledger's own
    assert lg.node("a").ephemeral == {R: 3}  # type: ignore[union-attr]
    lg.remove_node("a")
    assert lg.node("a") is None


@pytest.mark.parametrize("adopt", ["upsert", "adopt"])
def test_a_node_showing_zero_of_a_resource_does_not_have_it(adopt: str) -> None:
    """The fuzz tier's counterexample: a resource adopted at 0 was kept in the ledger, and
    remove_resource, which sets every node's capacity to 0, left has_resource true."""
    lg = Ledger("escher.io")
    lg.upsert_node("a", {}, {"cpu": 1000}, {R: 1})
    if adopt == "upsert":
        lg.upsert_node("a", {}, {"cpu": 1000}, {R: 0, S: 2})
    else:
        lg.adopt("a", {R: 0, S: 2})
    assert lg.node("a").ephemeral == {S: 2}  # type: ignore[union-attr]
    assert not lg.has_resource(R)
    assert lg.remove_resource(S) == ["a"] and not lg.has_resource(S)


def test_adopt_takes_the_nodes_values_back_without_a_write() -> None:
    lg = ledger("a", cap=3)
    lg.hold("p", "a", {R: 1})
    seen: list[frozenset[str]] = []
    lg.subscribe(lambda v, nodes: seen.append(nodes))
    lg.set_capacity(S, {"a": 2})  # not written yet when the replica steps down
    lg.adopt("a", {R: 3})
    assert lg.node("a").ephemeral == {R: 3}  # type: ignore[union-attr]
    assert seen == [frozenset({"a"}), frozenset()]  # the adoption asks for no write
    assert dict(lg.nodes_with(R)) == {"a": 2} and not lg.has_resource(S)
    lg.adopt("gone", {R: 1})  # a node the ledger does not know is left alone
    assert lg.node("gone") is None


def test_snapshot_is_a_copy() -> None:
    lg = ledger("a", cap=1)
    snap = lg.snapshot()
    lg.set_capacity(R, {"a": 5})
    assert snap.nodes["a"].ephemeral == {R: 1}
    assert snap.version < lg.version


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        ({R: 1}, {"a": 3, "b": 8}),  # a: 1 of 4 left (2.5 rounds to 3), b: 3 of 4; c: none
        ({R: 2}, {"b": 5}),  # a is full after it: 0, left out
        ({R: 1, S: 1}, {"a": 5, "b": 8}),  # the mean of the two free fractions
        ({}, {}),
    ],
    ids=["one-resource", "full-left-out", "two-resources", "nothing"],
)
def test_least_allocated_scores_leave_out_zero(
    request_: dict[str, int], expected: dict[str, int]
) -> None:
    lg = ledger("a", "b", cap=4)
    lg.set_capacity(S, {"a": 4, "b": 4})
    lg.hold("p", "a", {R: 2})
    assert lg.least_allocated(["a", "b", "c"], request_, 10) == expected


def test_concurrent_holds_never_overcommit() -> None:
    nodes = [f"n{i}" for i in range(5)]
    lg = ledger(*nodes, cap=7)
    rnd = random.Random(1)
    plan = [(f"p{i}", rnd.choice(nodes), rnd.randint(1, 3)) for i in range(600)]
    won: list[tuple[str, str, int]] = []
    lock = threading.Lock()

    def worker(part: list[tuple[str, str, int]]) -> None:
        for pod, node, k in part:
            if lg.hold(pod, node, {R: k}) is None:
                with lock:
                    won.append((pod, node, k))
            if rnd.random() < 0.3:
                lg.release(pod)

    threads = [threading.Thread(target=worker, args=(plan[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    snap = lg.snapshot()
    for n in nodes:
        held = sum(h.amounts[R] for h in snap.holdings.values() if h.node == n)
        assert held == snap.nodes[n].used.get(R, 0) <= 7
    assert won


def test_the_filter_index_is_capacity_minus_used() -> None:
    lg = ledger("a", "b", cap=3)
    lg.hold("p", "a", {R: 2})
    lg.observe_bound("q", "b", {R: 5})  # a fact over capacity
    assert dict(lg.nodes_with(R)) == {"a": 1, "b": -2}
    lg.set_capacity(R, {"a": 0})
    assert dict(lg.nodes_with(R)) == {"b": -2}
    lg.remove_node("b")
    assert dict(lg.nodes_with(R)) == {} and not lg.has_resource(R)


def test_reserve_checks_physical_resources_and_is_all_or_nothing() -> None:
    lg = ledger("a", "b", cap=1)
    short = lg.reserve([("s0", "a", {"cpu": 3000}), ("s1", "a", {"cpu": 2000})])
    assert short is not None and short.resource == "cpu" and short.requested == 5000
    assert lg.holding("s0") is None and lg.reserved_nodes() == {}
    assert lg.reserve([("s0", "a", {"cpu": 3000, R: 1}), ("s1", "b", {"cpu": 4000})]) is None
    # Non-gang pods are checked on reserved nodes only: "b" is full, "a" has 1000m left.
    assert set(lg.short_of_physical(["a", "b"], {"cpu": 1000})) == {"b"}
    assert set(lg.short_of_physical(["a", "b"], {"cpu": 1500})) == {"a", "b"}


@pytest.mark.parametrize(
    ("amounts", "short"),
    [
        ({"cpu": 1000}, {"b": "cpu"}),
        ({"memory": 1, "cpu": 1500}, {"b": "memory", "a": "cpu"}),  # the first one short
        ({"cpu": 1500, "memory": 1}, {"a": "cpu", "b": "cpu"}),
        ({"example.com/gpu": 1}, {}),  # reported by no node: not ours to judge
        ({R: 5}, {}),  # ephemeral: the ephemeral filter's
    ],
)  # fmt: skip
def test_only_reserved_nodes_are_checked_for_physical_room(
    amounts: dict[str, int], short: dict[str, str]
) -> None:
    lg = ledger("a", "b", "c", cap=1)
    lg.upsert_node("a", {}, {"cpu": 4000, "memory": 2, "pods": 10})
    lg.upsert_node("b", {}, {"cpu": 4000, "memory": 2, "pods": 10})
    lg.upsert_node("c", {}, {"cpu": 0, "memory": 0, "pods": 0})  # full, but nothing reserved
    assert lg.reserve([("s0", "a", {"cpu": 3000}), ("s1", "b", {"cpu": 4000, "memory": 2})]) is None
    assert lg.short_of_physical(["a", "b", "c"], amounts) == short
    lg.release("s1")
    lg.remove_node("a")
    assert lg.short_of_physical(["a", "b", "c"], amounts) == {}


def test_convert_hands_a_reserved_place_to_its_pod() -> None:
    lg = ledger("a", cap=2)
    assert lg.reserve([("slot", "a", {R: 2, "cpu": 1000})]) is None
    assert lg.convert("slot", "pod-uid", {R: 1, "cpu": 500})
    h = lg.holding("pod-uid")
    assert h is not None and h.kind is HolderKind.ASSUMED and h.node == "a"
    assert lg.holding("slot") is None and lg.reserved_nodes() == {}
    assert lg.node("a").used == {R: 1, "cpu": 500}  # type: ignore[union-attr]
    assert not lg.convert("slot", "x", {R: 1})


@pytest.mark.parametrize(
    ("how", "kind"),
    [
        ("hold", HolderKind.ASSUMED),
        ("reserve", HolderKind.RESERVATION),
        ("observe_bound", HolderKind.POD),
        ("observe_claim", HolderKind.CLAIM),
        ("convert", HolderKind.ASSUMED),
    ],
)
def test_no_holding_is_tracked_by_the_garbage_collector(how: str, kind: HolderKind) -> None:
    # Hundreds of thousands are held at once (a gang of 1,024 is 1,024 of them): each one
    # tracked was an object every full collection walked, with the event loop stopped.
    lg = ledger("a", cap=2)
    amounts = {R: 1, "cpu": 100}
    if how == "hold":
        assert lg.hold("h", "a", amounts) is None
    elif how == "reserve":
        assert lg.reserve([("h", "a", amounts)]) is None
    elif how == "observe_bound":
        lg.observe_bound("h", "a", amounts, priority=5)
    elif how == "observe_claim":
        lg.observe_bound("h", "a", amounts, kind=HolderKind.CLAIM)
    else:
        assert lg.reserve([("slot", "a", amounts)]) is None
        assert lg.convert("slot", "h", amounts)
    h = lg.holding("h")
    assert h is not None and h.kind is kind and h.amounts == amounts
    assert not gc.is_tracked(h)
    assert not gc.is_tracked(h.amounts)


@pytest.mark.parametrize("places", [1, 1000])
def test_holdings_add_nothing_to_what_the_garbage_collector_walks(places: int) -> None:
    lg = ledger("a", "b", cap=places)
    lg.hold("warm", "a", {"cpu": 1})  # the first holding of a node makes its index entry
    lg.hold("warm", "b", {"cpu": 1})
    before = walked()
    shape = {R: 1, "cpu": 1}
    assert lg.reserve([(f"s{i}", "ab"[i % 2], shape) for i in range(places)]) is None
    for i in range(places):
        lg.hold(f"p{i}", "ab"[i % 2], {R: 1} if i % 3 else shape)
    # A few objects the reservation left (the nodes' new views), never one per holding.
    assert walked() - before < 50


def test_a_reservation_keeps_one_copy_of_each_shape_its_caller_cannot_change() -> None:
    lg = ledger("a", "b", cap=4)
    ghost = {R: 1, "cpu": 100}  # the members to come all share their first member's shape
    own = {R: 2, "cpu": 100}
    places = [("s0", "a", own), ("s1", "a", ghost), ("s2", "b", ghost), ("s3", "b", ghost)]
    assert lg.reserve(places) is None
    held = [lg.holding(f"s{i}") for i in range(4)]
    assert all(h is not None for h in held)
    s0, s1, s2, s3 = (h.amounts for h in held if h is not None)
    assert s1 is s2 is s3 and s1 is not ghost and s0 is not s1 and s0 == own
    ghost[R] = 3  # the caller's mapping changes later: the ledger's does not
    assert s1 == {R: 1, "cpu": 100}
    assert lg.node("b").used == {R: 2, "cpu": 200}  # type: ignore[union-attr]
    lg.release("s2")
    assert lg.node("b").used == {R: 1, "cpu": 100}  # type: ignore[union-attr]
    assert lg.holding("s3").amounts == {R: 1, "cpu": 100}  # type: ignore[union-attr]


def test_totals_follow_the_holdings() -> None:
    lg = ledger("a", "b", cap=2)
    lg.hold("p", "a", {R: 1})
    lg.observe_bound("q", "b", {R: 1})
    lg.reserve([("s", "b", {"cpu": 100})])
    lg.observe_bound("c", "a", {R: 1}, kind=HolderKind.CLAIM)
    t = lg.totals()
    assert (t.nodes, t.resources) == (2, 1)
    assert t.holdings == dict.fromkeys(HolderKind, 1)
    assert [h.holder for h in lg.holders_on("b")] in (["q", "s"], ["s", "q"])
    assert lg.node("a").used == {R: 2}  # type: ignore[union-attr]


def test_adopting_a_nodes_capacities_is_not_something_to_write_back() -> None:
    lg = Ledger("escher.io")
    seen: list[frozenset[str]] = []
    lg.subscribe(lambda v, nodes: seen.append(nodes))
    lg.upsert_node("a", {}, {"cpu": 1000}, {R: 3})
    lg.set_capacity(R, {"a": 4})
    assert seen == [frozenset(), frozenset({"a"})]


def test_pods_bound_beyond_a_lowered_capacity_are_shown_until_they_leave() -> None:
    """A decrease races with kube-scheduler's own binds: the pod watch reports pods bound
    against the old capacity after the ledger lowered it. The node must then show what they
    hold (never over capacity, and no room for more), and the capacity once they are gone;
    each change of what it shows is told to the listeners with the node."""
    lg = ledger("n1", cap=3)
    told: list[frozenset[str]] = []
    lg.subscribe(lambda _version, nodes: told.append(nodes))
    lg.observe_bound("a", "n1", {R: 1})
    lg.set_capacity(R, {"n1": 1})  # the ledger had seen one pod: the decrease is allowed
    assert shown(lg, "n1") == {R: 1}
    told.clear()
    for pod in ("b", "c"):  # bound against the old capacity, reported late
        lg.observe_bound(pod, "n1", {R: 1})
    assert shown(lg, "n1") == {R: 3} and told == [frozenset({"n1"})] * 2
    told.clear()
    lg.release("b")
    assert shown(lg, "n1") == {R: 2} and told == [frozenset({"n1"})]
    lg.release("c")
    assert shown(lg, "n1") == {R: 1}
    told.clear()
    lg.release("a")  # within the capacity: nothing to show differently
    assert shown(lg, "n1") == {R: 1} and told == [frozenset()]


def shown(lg: Ledger, node: str) -> dict[str, int]:
    view = lg.node(node)
    assert view is not None
    return view.shown()
