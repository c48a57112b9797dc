"""The ledger: ephemeral resources per node and what holds them. Pure Python, no I/O.

Per node it keeps what the cluster view reports (labels, taints, the physical allocatable:
cpu, memory, pods and foreign extended resources) and the ephemeral resources the policy API
created (full name -> capacity). Holders take amounts on one node: a pod that is bound
(observed from the API server), one the extender accepted at bind that the API server has
not confirmed yet (bind is asynchronous, so several may be in flight), a reservation
(a gang's places, held before its pods are placed), or in mode dra a ResourceClaim's devices
(observed: kube-scheduler allocates them, the claims are what it counts).

Invariant: no decision taken here lets an ephemeral resource on a node go over capacity.
Observations of what the cluster already did (a pod plain kube-scheduler bound) are recorded
as facts even when they exceed capacity; they then block further placements.

Concurrency. Every change is atomic (all of it or none, under one lock held only for work
proportional to what changes) and bumps `version`. Readers never take the lock: each node is
an immutable NodeView that a change replaces, so `node()` and the filter's index lookups see
either the old or the new node, never half of one, and `snapshot()` is a copy of a dict of
pointers. Totals for metrics are maintained as changes happen.

Called by the scheduling verbs and the gang feature (decisions), the policy API and the ESLs
(capacities), the cluster view (facts from the API server) and the write-back (what to
persist, through `subscribe`).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, NamedTuple

from msgspec import Struct

from extender.core.errors import Conflict, CoreError, UnknownNode
from extender.core.objects import Taint


class HolderKind(StrEnum):
    POD = "pod"  # bound, as observed from the API server
    ASSUMED = "assumed"  # accepted for binding, not yet observed bound
    RESERVATION = "reservation"  # places held for pods that have not been placed yet
    CLAIM = "claim"  # mode dra: devices a ResourceClaim holds, as the API server reports


class Holding(Struct, frozen=True, gc=False):
    """Amounts that one holder takes on one node.

    Not tracked by the garbage collector (a msgspec Struct with gc=False): a gang of 1,024
    reserves 1,024 of them at once and a large cluster holds hundreds of thousands, each one
    an object every full collection would walk. A Holding refers only to strings, ints, its
    kind (an enum member) and a dict of ints, none of which refers back: it can be in no
    reference cycle."""

    holder: str
    node: str
    amounts: Mapping[str, int]
    kind: HolderKind
    priority: int = 0  # of a pod: who may preempt it


@dataclass(frozen=True, slots=True)
class Shortfall:
    """Why a node cannot take an amount of a resource (a decision, returned as a value)."""

    node: str
    resource: str
    requested: int
    available: int
    capacity: int

    @property
    def unresolvable(self) -> bool:
        """True when evicting every holder would still not make room."""
        return self.capacity < self.requested

    def __str__(self) -> str:
        # Node-independent, as NodeResourcesFit words it: kube-scheduler counts nodes per
        # distinct reason ("0/4 nodes are available: 3 Insufficient escher.io/x, ...").
        if self.capacity == 0:
            return f"node(s) lack {self.resource}"
        return f"Insufficient {self.resource}"

    @property
    def detail(self) -> str:
        return (
            f"{self.node}: {self.resource} requested {self.requested}, "
            f"available {self.available} of {self.capacity}"
        )


_EMPTY: Mapping[str, Any] = MappingProxyType({})  # a default no view can change


class NodeView(NamedTuple):
    """One node at one moment. Never mutated: a change makes a new one. A tuple rather than
    a frozen dataclass: the policy API and the ESLs make thousands at once, and a tuple is
    built in C where a frozen dataclass sets each field through object.__setattr__."""

    name: str
    labels: Mapping[str, str] = _EMPTY
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    physical: Mapping[str, int] = _EMPTY
    ephemeral: Mapping[str, int] = _EMPTY
    used: Mapping[str, int] = _EMPTY

    def capacity(self, resource: str) -> int:
        return self.ephemeral.get(resource, self.physical.get(resource, 0))

    def available(self, resource: str) -> int:
        return max(0, self.capacity(resource) - self.used.get(resource, 0))

    def shown(self) -> dict[str, int]:
        """Each ephemeral resource's capacity, or what its holders hold if that is more (the
        listeners are told when it changes with the holdings). Holders can exceed a capacity
        just lowered: the ledger refuses a decrease below what it has seen allocated, but
        kube-scheduler may have placed pods against the old capacity that the watch has not
        reported yet. Neither write-back raises a capacity to it: the Node-status one writes
        the capacities (extender.writeback.nodes), so kube-scheduler finds no room there
        until the holders are below it, and mode dra publishes only the held devices, tainted
        so that none is allocated again (extender.dra.slices)."""
        used = self.used
        return {r: max(cap, used.get(r, 0)) for r, cap in self.ephemeral.items()}


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A consistent copy of the whole ledger at one version (dicts of immutable parts)."""

    version: int
    nodes: Mapping[str, NodeView]
    holdings: Mapping[str, Holding]


@dataclass(frozen=True, slots=True)
class Totals:
    """What the metrics report, maintained as changes happen (no scan of the nodes)."""

    version: int
    nodes: int
    resources: int
    holdings: Mapping[HolderKind, int]


Listener = Callable[[int, frozenset[str]], None]

SCORE_CACHES = 4  # cached LeastAllocated answers per resource (distinct amounts asked)


def _least(free: int, cap: int, want: int, top: int) -> int:
    """`top` times the fraction of `cap` left free after taking `want`, rounded."""
    left = free - want
    return int(top * left / cap + 0.5) if left > 0 else 0


class Ledger:
    """Thread-safe; every public method is atomic; reads take no lock."""

    def __init__(self, domain: str = "escher.io") -> None:
        # Resources under this domain are ephemeral: the ledger decides them. Others (cpu,
        # memory, foreign extended resources) are only counted: kube-scheduler checks them.
        self.prefix = domain + "/"
        self._lock = threading.Lock()
        self._version = 0
        # Bumped when what a node could ever hold changes (a node added, removed or changed:
        # labels, taints, allocatable; an ephemeral capacity set): a gang that could never
        # fit is planned again only then (extender.gang.gate).
        self.shape = 0
        self._nodes: dict[str, NodeView] = {}
        self._holdings: dict[str, Holding] = {}
        # Ephemeral resource -> node -> free units (the filter's index), and -> capacity.
        self._free: dict[str, dict[str, int]] = {}
        self._caps: dict[str, dict[str, int]] = {}
        # Resource -> (amount, top) -> node -> LeastAllocated score (see _scores_of).
        self._scores: dict[str, dict[tuple[int, int], dict[str, int]]] = {}
        # Resource -> its nodes as (-used, name), sorted: the fullest first, equals by name
        # (see most_used). Only for the resources a pack preference has asked about; kept up
        # to date by _index and dropped with the resource.
        self._ranks: dict[str, list[tuple[int, str]]] = {}
        # Node -> reservation holdings on it: ReservationFit checks only these nodes.
        self._reserved: dict[str, int] = {}
        # Physical resource -> node -> what is free of it (allocatable less everything held),
        # for each node that reports it: ReservationFit's check is a lookup per node.
        self._room: dict[str, dict[str, int]] = {}
        # Node -> its holders (preemption and node removal look at one node's holders), each
        # a dict with None values rather than a set: a dict of strings is not tracked by the
        # garbage collector, a set always is, and every full collection walked each entry.
        # (_holdings, of strings and untracked Holdings, is not tracked either.)
        self._on_node: dict[str, dict[str, None]] = {}
        self._kinds = dict.fromkeys(HolderKind, 0)
        self._listeners: list[Listener] = []
        # Nodes whose shown() changed with their holdings (a pod bound beyond a capacity, or
        # one of those leaving): told to the listeners with the next change.
        self._reshown: set[str] = set()
        # A check of every capacity change before it is applied (mode dra: what ResourceSlices
        # can publish); raises a core error, and then nothing is changed.
        self.guard: Callable[[str, Mapping[str, int]], None] | None = None

    # ---- observation (no lock) ----------------------------------------------------------

    @property
    def version(self) -> int:
        return self._version

    def subscribe(self, listener: Listener) -> None:
        """Call `listener(version, nodes whose shown() changed)` after changes.

        Called with the lock held, on whatever thread made the change: a listener only
        records and wakes, never blocks.
        """
        self._listeners.append(listener)

    def snapshot(self) -> Snapshot:
        with self._lock:  # only so the two copies are of the same version
            return Snapshot(self._version, dict(self._nodes), dict(self._holdings))

    def node(self, name: str) -> NodeView | None:
        return self._nodes.get(name)

    def node_names(self) -> list[str]:
        return list(self._nodes)

    def node_count(self) -> int:
        return len(self._nodes)

    def unknown(self, names: Iterable[str]) -> list[str]:
        """Those of `names` that are not nodes here (a membership test per name, without a
        method call per name: the standalone filter asks this of thousands)."""
        known = self._nodes
        return [n for n in names if n not in known]

    def holding(self, holder: str) -> Holding | None:
        return self._holdings.get(holder)

    def has_resource(self, resource: str) -> bool:
        return bool(self._free.get(resource))

    def most_used(self, resource: str, nodes: Sequence[str]) -> str | None:
        """The one of `nodes` with the most units of an ephemeral resource in use (the first
        by name among equals), None when none has it: what a pack preference scores.

        prioritize asks it of every feasible node, 5,000 at a time, so it walks the
        resource's ranking (fullest first) to the first offered node, a set lookup a step:
        the nodes before it are those not offered, mostly the full ones. Even a walk of every
        node costs less than one pass computing each offered node's use (66 us against 490
        at 5,000 nodes), and the set of offered names as much again.
        """
        caps, free = self._caps.get(resource), self._free.get(resource)
        if not caps or free is None or not nodes:
            return None
        ranks = self._ranks.get(resource)
        if ranks is None:
            ranks = self._rank(resource, free, caps)
        offered: Sequence[str] | set[str] = set(nodes) if len(nodes) > 8 else nodes
        # A list another thread changes under the walk may be read a step off: a score,
        # not a decision, and the next call reads it right.
        for _, name in ranks:
            if name in offered:
                return name
        return None

    def _rank(
        self, resource: str, free: dict[str, int], caps: dict[str, int]
    ) -> list[tuple[int, str]]:
        """Build `resource`'s ranking (once; _index keeps it). Built from copies without the
        lock (this runs on the event loop), and kept only if nothing changed meanwhile and
        the lock is free at once, as a cached score is."""
        version = self._version
        pairs, capacity = list(free.items()), dict(caps)
        ranks = sorted((f - capacity[n], n) for n, f in pairs if n in capacity)
        if self._lock.acquire(blocking=False):
            try:
                if self._version == version and self._free.get(resource) is free:
                    self._ranks[resource] = ranks
            finally:
                self._lock.release()
        return ranks

    def nodes_with(self, resource: str) -> Mapping[str, int]:
        """Free units of an ephemeral resource, per node that has it (a live read-only view:
        copy it before iterating while others may change the ledger)."""
        return self._free.get(resource, {})

    def reserved_nodes(self) -> Mapping[str, int]:
        """Nodes holding reservations (and how many); empty when there are none."""
        return self._reserved

    def totals(self) -> Totals:
        return Totals(self._version, len(self._nodes), len(self._free), dict(self._kinds))

    # ---- decisions --------------------------------------------------------------------------

    def shortfalls(self, nodes: Iterable[str], request: Mapping[str, int]) -> dict[str, Shortfall]:
        """For each node that cannot take `request` (ephemeral amounts), the first reason.

        The filter's hot path: index lookups only, no lock (each node's free amount is read
        atomically; bind re-checks under the lock).
        """
        out: dict[str, Shortfall] = {}
        items = list(request.items())
        if len(items) == 1:
            (res, want), *_ = items
            free = self._free.get(res, {})
            for name in nodes:
                if free.get(name, 0) < want:
                    out[name] = self._shortfall(name, res, want)
            return out
        for name in nodes:
            for res, want in items:
                if self._free.get(res, {}).get(name, 0) < want:
                    out[name] = self._shortfall(name, res, want)
                    break
        return out

    def _shortfall(self, name: str, res: str, want: int) -> Shortfall:
        view = self._nodes.get(name)
        if view is None:
            return Shortfall(name, res, want, 0, 0)
        cap = view.ephemeral.get(res, 0)
        return Shortfall(name, res, want, max(0, cap - view.used.get(res, 0)), cap)

    def least_allocated(
        self, nodes: Iterable[str], request: Mapping[str, int], top: int
    ) -> Mapping[str, int]:
        """Per node, `top` times the mean fraction of each requested resource left free after
        placing `request`, rounded: NodeResourcesFit's LeastAllocated over the ledger. Nodes
        scoring 0 (no room, or too little to round up) are left out: to a caller that adds
        scores up, as kube-scheduler does, absent and 0 are the same.

        For one resource, the answer is the live cache of every node's score, `nodes` or not
        (a ScorePlugin's contract): prioritize then reads it with one lookup per offered node,
        rather than after a copy restricted to them. Read it with `get`, never iterate it: the
        ledger updates it in place."""
        out: dict[str, int] = {}
        if len(request) == 1:  # the common case
            ((res, want),) = request.items()
            return self._scores_of(res, want, top)
        if not request:
            return out
        fractions = dict.fromkeys(nodes, 0.0)
        share = 1 / len(request)
        for res, want in request.items():
            free, caps = self._free.get(res, {}), self._caps.get(res, {})
            for name in fractions:
                left = free.get(name, 0) - want
                if left > 0:
                    fractions[name] += share * left / caps[name]
        for name, fraction in fractions.items():
            if score := int(top * fraction + 0.5):
                out[name] = score
        return out

    def _scores_of(self, res: str, want: int, top: int) -> Mapping[str, int]:
        """LeastAllocated for one resource and amount, per node that has it (nonzero only).

        Kept for the last few (amount, top) of each resource and updated node by node as the
        free index changes, so that prioritize costs a lookup per node. A miss is computed
        without the lock (prioritize runs on the event loop), and kept only if nothing
        changed meanwhile and the lock is free at once.
        """
        cached = self._scores.get(res, {}).get((want, top))
        if cached is not None:
            return cached
        version = self._version
        free, caps = self._free.get(res, {}), self._caps.get(res, {})
        # One C-level copy each: another thread may change the index while we read.
        pairs, capacity = list(free.items()), dict(caps)
        scores = {
            n: score
            for n, f in pairs
            if (cap := capacity.get(n)) and (score := _least(f, cap, want, top))
        }
        if free and self._lock.acquire(blocking=False):
            try:
                if self._version == version and self._free.get(res) is free:
                    per = self._scores.setdefault(res, {})
                    if len(per) >= SCORE_CACHES:
                        del per[next(iter(per))]  # the oldest
                    per[(want, top)] = scores
            finally:
                self._lock.release()
        return scores

    def short_of_physical(self, nodes: Iterable[str], amounts: Mapping[str, int]) -> dict[str, str]:
        """Of `nodes`, those holding reservations whose physical allocatable, less everything
        held (reservations included), cannot take `amounts`, each with the first resource
        short, in the order of `amounts`. Nodes without reservations are not checked:
        kube-scheduler's own NodeResourcesFit already did, over the same pods. A lookup per
        node and resource in the physical free index, no view read, no object per node, and
        no lock (each entry is read atomically; a reservation re-checks under the lock)."""
        reserved = self._reserved
        if not reserved:
            return {}
        held = [n for n in nodes if n in reserved]
        out: dict[str, str] = {}
        for res, want in amounts.items():
            room = self._room.get(res)
            if room is None or res.startswith(self.prefix):
                continue  # reported by no node (not ours to judge), or ephemeral
            for name in [n for n in held if room.get(n, want) < want]:
                out.setdefault(name, res)
        return out

    def hold(
        self,
        holder: str,
        node: str,
        amounts: Mapping[str, int],
        kind: HolderKind = HolderKind.ASSUMED,
        priority: int = 0,
    ) -> Shortfall | None:
        """Take `amounts` on `node` for `holder` if its ephemeral resources have room.

        Idempotent for the same holder on the same node; a holder moving to another node
        releases its old place in the same step. Returns the shortfall, or None when held.
        Only ephemeral resources are checked; the rest are counted.
        """
        with self._lock:
            view = self._nodes.get(node)
            if view is None:
                res = next(iter(amounts), "node")
                return Shortfall(node, res, amounts.get(res, 0), 0, 0)
            old = self._holdings.get(holder)
            if (
                old is not None
                and old.node == node
                and old.amounts == amounts
                and old.kind in (kind, HolderKind.POD)
            ):
                return None  # already held (a bound pod stays the fact it is)
            credit = old.amounts if old is not None and old.node == node else {}
            short = self._check(view, amounts, credit, physical=False)
            if short is not None:
                return short
            self._put(Holding(holder, node, dict(amounts), kind, priority))
            self._changed(frozenset())
            return None

    def reserve(self, places: Sequence[tuple[str, str, Mapping[str, int]]]) -> Shortfall | None:
        """Hold every place (holder, node, amounts) as a reservation, or none.

        Unlike `hold`, physical resources are checked too: a reservation is taken for pods
        kube-scheduler has not placed yet, so nothing else has checked them. A holder already
        held on the same node is credited with what it holds (re-reserving, or turning an
        assumed holding back into a reservation).
        """
        with self._lock:
            need: dict[str, dict[str, int]] = {}
            credit: dict[str, dict[str, int]] = {}
            for holder, node, amounts in places:
                per = need.setdefault(node, {})
                for res, v in amounts.items():
                    per[res] = per.get(res, 0) + v
                old = self._holdings.get(holder)
                if old is not None and old.node == node:
                    mine = credit.setdefault(node, {})
                    for res, v in old.amounts.items():
                        mine[res] = mine.get(res, 0) + v
            for node, per in need.items():
                view = self._nodes.get(node)
                if view is None:
                    return Shortfall(node, "node", 1, 0, 0)
                short = self._check(view, per, credit.get(node, {}), physical=True)
                if short is not None:
                    return short
            # In bulk: the holdings one by one, then each node's used amounts once (a gang of
            # 1,024 reserves on a few nodes; a new view per holding would be 1,024 of them).
            final = {holder: (node, amounts) for holder, node, amounts in places}  # last wins
            for holder in final:
                if holder in self._holdings:
                    self._drop(holder)
            added: dict[str, dict[str, int]] = {}
            # One copy of each distinct mapping, shared by the holdings given it: a gang's
            # members to come are all shaped alike, and a dict per member is most of what a
            # held member costs in memory. Holdings never change their amounts.
            copies: dict[int, dict[str, int]] = {}
            for holder, (node, amounts) in final.items():
                own = copies.get(id(amounts))
                if own is None:
                    own = copies[id(amounts)] = dict(amounts)
                self._put(Holding(holder, node, own, HolderKind.RESERVATION), count=False)
                per = added.setdefault(node, {})
                for res, v in amounts.items():
                    per[res] = per.get(res, 0) + v
            for node, per in added.items():
                self._add_used(node, per, +1)
            if places:
                self._changed(frozenset())
            return None

    def _check(
        self,
        view: NodeView,
        amounts: Mapping[str, int],
        credit: Mapping[str, int],
        physical: bool,
    ) -> Shortfall | None:
        for res, want in amounts.items():
            if want <= 0:
                continue
            if res.startswith(self.prefix):
                cap = view.ephemeral.get(res, 0)
            elif physical and res in view.physical:
                cap = view.physical[res]
            else:
                continue  # not ours to judge
            free = cap - view.used.get(res, 0) + credit.get(res, 0)
            if free < want:
                return Shortfall(view.name, res, want, max(0, free), cap)
        return None

    def holders_on(self, node: str) -> list[Holding]:
        with self._lock:
            return [self._holdings[h] for h in self._on_node.get(node, ())]

    def observe_bound(
        self,
        holder: str,
        node: str,
        amounts: Mapping[str, int],
        priority: int = 0,
        kind: HolderKind = HolderKind.POD,
    ) -> None:
        """Record what the API server reports held on `node`, a pod bound there (or with
        `kind` CLAIM, a ResourceClaim's devices there): a fact, never refused.

        Replaces, in one step, any earlier holding of the same holder. A node not known yet
        is created (its status arrives with the node's own event).
        """
        with self._lock:
            old = self._holdings.get(holder)
            if (
                old is not None
                and old.kind is kind
                and old.node == node
                and old.amounts == amounts
                and old.priority == priority
            ):
                return
            if node not in self._nodes:
                self._nodes[node] = NodeView(node)
            self._put(Holding(holder, node, dict(amounts), kind, priority=priority))
            self._changed(frozenset())  # with the node if the pod is held beyond a capacity

    def convert(self, old: str, new: str, amounts: Mapping[str, int]) -> bool:
        """Hand `old`'s place to `new` (assumed, on the same node), in one step: a reserved
        place taken by the pod it was for. `amounts` must not exceed what `old` held (the
        caller checked), so nothing is re-checked. False when `old` is not held."""
        with self._lock:
            h = self._holdings.get(old)
            if h is None:
                return False
            self._drop(old)
            self._put(Holding(new, h.node, dict(amounts), HolderKind.ASSUMED, h.priority))
            self._changed(frozenset())
            return True

    def release(self, holder: str) -> bool:
        with self._lock:
            if holder not in self._holdings:
                return False
            self._drop(holder)
            self._changed(frozenset())
            return True

    def release_all(self, holders: Iterable[str]) -> int:
        """Release every one of `holders` that is held, in one step."""
        with self._lock:
            gone = [h for h in dict.fromkeys(holders) if h in self._holdings]  # once each
            # In bulk, as reserve: each node's used amounts once, not a new view per holding
            # (a gang of 1,024 gives back its places on a few nodes).
            freed: dict[str, dict[str, int]] = {}
            for h in gone:
                held = self._drop(h, count=False)
                if held.node in self._nodes:
                    per = freed.setdefault(held.node, {})
                    for res, v in held.amounts.items():
                        per[res] = per.get(res, 0) + v
            for node, per in freed.items():
                self._add_used(node, per, -1)
            if gone:
                self._changed(frozenset())
            return len(gone)

    # ---- holdings, under the lock --------------------------------------------------------

    def _put(self, h: Holding, count: bool = True) -> None:
        """Record holding `h`; with count=False the caller adds its amounts to the node's
        used amounts itself (in bulk)."""
        if h.holder in self._holdings:
            self._drop(h.holder)
        self._holdings[h.holder] = h
        self._on_node.setdefault(h.node, {})[h.holder] = None
        self._kinds[h.kind] += 1
        if h.kind is HolderKind.RESERVATION:
            self._reserved[h.node] = self._reserved.get(h.node, 0) + 1
        if count:
            self._add_used(h.node, h.amounts, +1)

    def _drop(self, holder: str, count: bool = True) -> Holding:
        """Forget `holder`'s holding; with count=False the caller takes its amounts off the
        node's used amounts itself (in bulk)."""
        h = self._holdings.pop(holder)
        here = self._on_node[h.node]
        here.pop(holder, None)
        if not here:
            del self._on_node[h.node]
        self._kinds[h.kind] -= 1
        if h.kind is HolderKind.RESERVATION:
            left = self._reserved[h.node] - 1
            if left:
                self._reserved[h.node] = left
            else:
                del self._reserved[h.node]
        if count and h.node in self._nodes:
            self._add_used(h.node, h.amounts, -1)
        return h

    def _add_used(self, node: str, amounts: Mapping[str, int], sign: int) -> None:
        view = self._nodes[node]
        used = dict(view.used)
        for res, v in amounts.items():
            before = used.get(res, 0)
            left = before + sign * v
            if left > 0:
                used[res] = left
            else:
                used.pop(res, None)
            cap = view.ephemeral.get(res)
            if cap is not None and max(before, left) > cap:
                self._reshown.add(node)
        self._set_view(view._replace(used=used))

    def _set_view(self, view: NodeView) -> None:
        """Install a node's new view and bring the free indexes up to date for it."""
        old = self._nodes.get(view.name)
        self._nodes[view.name] = view
        names = set(view.ephemeral)
        if old is not None:
            names |= old.ephemeral.keys()
        for res in names:
            self._index(res, view.name, view.ephemeral.get(res), view.used.get(res, 0))
        self._index_room(view.name, view.physical, view.used, old.physical if old else _EMPTY)

    def _index_room(
        self,
        node: str,
        physical: Mapping[str, int],
        used: Mapping[str, int],
        before: Mapping[str, int] = _EMPTY,
    ) -> None:
        """Bring the physical free index up to date for one node (`before`: the physical
        resources it reported until now)."""
        for res, cap in physical.items():
            room = self._room.get(res)
            if room is None:
                room = self._room[res] = {}
            room[node] = cap - used.get(res, 0)
        for res in before:
            if res not in physical and (room := self._room.get(res)) is not None:
                room.pop(node, None)

    def _index(self, res: str, node: str, cap: int | None, used: int) -> None:
        """Bring `res`'s free index, capacities, ranking and cached scores up to date for one
        node (`cap` None: the node no longer has it)."""
        free = self._free.get(res)
        ranks = self._ranks.get(res)
        if ranks is not None and free is not None and node in free:
            entry = (free[node] - self._caps[res][node], node)
            i = bisect.bisect_left(ranks, entry)
            if i < len(ranks) and ranks[i] == entry:
                del ranks[i]
            else:  # never expected: rebuilt on the next ask rather than kept wrong
                del self._ranks[res]
                ranks = None
        if cap is None:
            if free is None:
                return
            free.pop(node, None)
            self._caps[res].pop(node, None)
            if not free:
                del self._free[res], self._caps[res]
                self._scores.pop(res, None)
                self._ranks.pop(res, None)
                return
        else:
            if free is None:
                free = self._free[res] = {}
                self._caps[res] = {}
            free[node] = cap - used
            self._caps[res][node] = cap
            if ranks is not None:
                bisect.insort(ranks, (-used, node))
        for (want, top), scores in self._scores.get(res, {}).items():
            if cap is not None and (score := _least(cap - used, cap, want, top)):
                scores[node] = score
            else:
                scores.pop(node, None)

    def _set_one(self, node: str, resource: str, cap: int) -> bool:
        """Set one ephemeral resource's capacity on one node (0 removes it); True if it
        changed. `_set_view` for a single resource: the policy API and the ESLs change one
        resource on thousands of nodes at once, so this touches only that resource's index
        and builds the new view in one call."""
        view = self._nodes[node]
        if view.ephemeral.get(resource, 0) == cap:
            return False
        eph = dict(view.ephemeral)
        if cap:
            eph[resource] = cap
        else:
            del eph[resource]
        self._index(resource, node, cap or None, view.used.get(resource, 0))
        self._nodes[node] = NodeView(
            node, view.labels, view.taints, view.unschedulable, view.physical, eph, view.used
        )
        return True

    # ---- nodes (facts from the cluster view) -----------------------------------------------

    def upsert_node(
        self,
        name: str,
        labels: Mapping[str, str],
        physical: Mapping[str, int],
        ephemeral: Mapping[str, int] | None = None,
        taints: Sequence[Taint] = (),
        unschedulable: bool = False,
    ) -> bool:
        """Record a node's labels, taints and physical allocatable; True if anything changed.

        `ephemeral` is given only when the node's written resources are the truth (rebuilding
        after a restart, or a follower replica adopting the leader's writes); otherwise the
        ledger's own capacities stand.
        """
        with self._lock:
            old = self._nodes.get(name)
            eph = (
                _present(ephemeral) if ephemeral is not None else dict(old.ephemeral if old else {})
            )
            view = NodeView(
                name,
                dict(labels),
                tuple(taints),
                unschedulable,
                dict(physical),
                eph,
                dict(old.used) if old is not None else {},
            )
            if view == old:
                return False
            self._set_view(view)
            self.shape += 1
            # Nothing to write back: adopted capacities came from the node itself.
            self._changed(frozenset())
            return True

    def adopt(self, name: str, ephemeral: Mapping[str, int]) -> None:
        """Take `ephemeral` as the node's resources, as the node shows them (a replica that
        stops leading drops what it had not written yet: the nodes are the truth again)."""
        shown = _present(ephemeral)
        with self._lock:
            old = self._nodes.get(name)
            if old is None or old.ephemeral == shown:
                return
            self._set_view(old._replace(ephemeral=shown))
            self.shape += 1
            self._changed(frozenset())  # nothing to write back: it came from the node

    def remove_node(self, name: str) -> None:
        with self._lock:
            if name not in self._nodes:
                return
            for holder in list(self._on_node.get(name, ())):
                self._drop(holder)
            view = self._nodes[name]
            self._set_view(view._replace(ephemeral={}))
            self._index_room(name, _EMPTY, _EMPTY, view.physical)
            del self._nodes[name]
            self.shape += 1
            self._changed(frozenset())

    def learn_nodes(self, names: Iterable[str]) -> list[str]:
        """Create empty nodes (the standalone mode knows nodes only from requests); returns
        the new ones. Callers validate the names first."""
        with self._lock:
            new = [n for n in names if n not in self._nodes]
            for n in new:
                self._nodes[n] = NodeView(n)
            if new:
                self.shape += 1
                self._changed(frozenset())
            return new

    # ---- policy changes --------------------------------------------------------------------

    def set_capacity(self, resource: str, capacity: Mapping[str, int]) -> int:
        """Set `resource`'s capacity on each given node (0 removes it there). Atomic.

        Raises UnknownNode or Conflict (below what is held) and applies nothing. Returns the
        new version.
        """
        if not resource.startswith(self.prefix):
            raise CoreError(f"{resource} is not under {self.prefix} the ledger owns", "name")
        if self.guard is not None:
            self.guard(resource, {n: c for n, c in capacity.items() if c})
        with self._lock:
            missing = [n for n in capacity if n not in self._nodes]
            if missing:
                raise UnknownNode(missing)
            check_above_allocated(self._nodes, resource, capacity)
            changed = [n for n, cap in capacity.items() if self._set_one(n, resource, cap)]
            if changed:
                self.shape += 1
                self._changed(frozenset(changed))
            return self._version

    def remove_resource(self, resource: str, force: bool = False) -> list[str]:
        """Remove `resource` from every node; returns the nodes that had it.

        Refused (Conflict) while pods hold it, unless `force`: then the holders keep running
        (as with any extended resource removed from a node) and the ledger forgets their
        share of it.
        """
        with self._lock:
            nodes = list(self._free.get(resource, {}))
            if not force:
                check_unheld(self._nodes, resource, nodes)
            for n in nodes:
                self._set_one(n, resource, 0)
            if nodes:
                self.shape += 1
                self._changed(frozenset(nodes))
            return nodes

    def _changed(self, nodes: frozenset[str]) -> None:
        self._version += 1
        if self._reshown:
            nodes = nodes | self._reshown
            self._reshown = set()
        for listener in self._listeners:
            listener(self._version, nodes)


def check_above_allocated(
    nodes: Mapping[str, NodeView], resource: str, capacity: Mapping[str, int]
) -> None:
    """Conflict if a capacity (not 0, which removes it) is below what pods hold there."""
    problems = [
        f"{n}: {resource} capacity {cap} is below the {held} already allocated"
        for n, cap in capacity.items()
        if 0 < cap < (held := nodes[n].used.get(resource, 0))
    ]
    if problems:
        raise Conflict("; ".join(problems[:5]), "capacity")


def check_unheld(nodes: Mapping[str, NodeView], resource: str, where: Iterable[str]) -> None:
    """Conflict if pods hold `resource` on any of `where` (a delete without force)."""
    held = {n: u for n in where if (u := nodes[n].used.get(resource, 0))}
    if held:
        shown = ", ".join(f"{n} ({u})" for n, u in sorted(held.items())[:5])
        raise Conflict(
            f"{resource} is held on {len(held)} node(s): {shown}; "
            "delete with force=true to remove it anyway",
            "name",
        )


def _present(ephemeral: Mapping[str, int]) -> dict[str, int]:
    """A node's resources as the ledger keeps them: a capacity of 0 is no resource (as
    set_capacity's 0 removes one), so a node showing `0` never counts as having it."""
    return {r: v for r, v in ephemeral.items() if v}
