"""The ledger's invariants, checked by the fuzz tier's state machines after every step
(tests/fuzz/test_fuzz_ledger.py drives the ledger itself, test_fuzz_gangs.py the gang
manager over it)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from extender.core.ledger import HolderKind, Ledger


def state(lg: Ledger) -> tuple[Any, ...]:
    """Everything a change could touch, for comparing before and after."""
    snap = lg.snapshot()
    resources = {r for v in snap.nodes.values() for r in v.ephemeral}
    index = {r: dict(lg.nodes_with(r)) for r in resources}
    return snap.version, snap.nodes, snap.holdings, index, lg.totals(), dict(lg.reserved_nodes())


def check_consistent(lg: Ledger, resources: Iterable[str]) -> None:
    """`used` is the holdings' sum, the free index is capacity minus used and the
    LeastAllocated scores follow it (for every one of `resources`, present or not), totals
    and reserved nodes match."""
    snap = lg.snapshot()
    used: dict[str, Counter[str]] = {n: Counter() for n in snap.nodes}
    kinds: Counter[HolderKind] = Counter()
    reserved: Counter[str] = Counter()
    for h in snap.holdings.values():
        assert h.node in snap.nodes, f"{h.holder} holds on unknown node {h.node}"
        used[h.node].update({r: v for r, v in h.amounts.items() if v})
        kinds[h.kind] += 1
        if h.kind is HolderKind.RESERVATION:
            reserved[h.node] += 1
    for name, view in snap.nodes.items():
        assert dict(view.used) == dict(used[name]), f"{name}: used is not the holdings' sum"
        assert {h.holder for h in lg.holders_on(name)} == {
            h.holder for h in snap.holdings.values() if h.node == name
        }
    for r in resources:
        free = {
            n: v.ephemeral[r] - v.used.get(r, 0) for n, v in snap.nodes.items() if r in v.ephemeral
        }
        assert dict(lg.nodes_with(r)) == free, f"the free index of {r} is not capacity - used"
        assert lg.has_resource(r) == bool(free)
        for want in (1, 2):  # cached per amount, and kept up to date change by change
            scores = {
                n: s
                for n, f in free.items()
                if f > want and (s := int(10 * (f - want) / snap.nodes[n].ephemeral[r] + 0.5))
            }
            got = lg.least_allocated(list(snap.nodes), {r: want}, 10)
            assert got == scores, f"LeastAllocated of {want} {r} is not the free index's"
    # ReservationFit's physical check, from its index, is the views' allocatable less used.
    physical = sorted({r for v in snap.nodes.values() for r in v.physical})
    for r in physical:
        for want in (1, 1000):
            expected = {
                n
                for n, v in snap.nodes.items()
                if n in reserved and r in v.physical and v.physical[r] - v.used.get(r, 0) < want
            }
            got = lg.short_of_physical(list(snap.nodes), {r: want})
            assert set(got) == expected, f"the physical free index of {r} is not allocatable - used"
    totals = lg.totals()
    assert totals.version == snap.version and totals.nodes == len(snap.nodes)
    assert totals.resources == len({r for v in snap.nodes.values() for r in v.ephemeral})
    assert {k: n for k, n in totals.holdings.items() if n} == dict(kinds)
    assert dict(lg.reserved_nodes()) == dict(reserved)


def check_within_capacity(
    lg: Ledger, places: Iterable[tuple[str, Mapping[str, int]]], physical: bool = False
) -> None:
    """After a decision: every resource it took on a node is at or under the node's capacity.
    Ephemeral resources always; with `physical` (a reservation), the node's reported
    allocatable too."""
    for node, taken in places:
        view = lg.node(node)
        assert view is not None, f"a decision took a place on unknown node {node}"
        for r, v in taken.items():
            if v <= 0:
                continue
            if r.startswith(lg.prefix):
                cap = view.ephemeral.get(r, 0)
            elif physical and r in view.physical:
                cap = view.physical[r]
            else:
                continue
            held = view.used.get(r, 0)
            assert held <= cap, f"a decision took {node}'s {r} to {held} of {cap}"
