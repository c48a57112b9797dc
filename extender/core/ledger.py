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
proportional to what changes) and bumps `version`. The hot reads take no lock: each node is an
immutable NodeView that a change replaces, so `node()` and the filter's index lookups
(`shortfalls`, the scores: extender.core.freeindex) see either the old or the new node, never
half of one. Two reads take the lock briefly for a consistent copy: `snapshot()` (two dicts of
pointers at one version) and `holders_on()`; a ranking or score computed without it is cached
only if the lock is free at once, so the event loop never waits for it. Totals for metrics are
maintained as changes happen.

The values it keeps and hands out live beside it: NodeView and the checks over it
(extender.core.nodeview), Holding, HolderKind and Shortfall (extender.core.holdings), Snapshot
and Totals (extender.core.snapshot).

Called by the scheduling verbs and the gang feature (decisions), the policy API and the ESLs
(capacities), the cluster view (facts from the API server) and the write-back (what to
persist, through `subscribe`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from extender.core.errors import CoreError, UnknownNode
from extender.core.freeindex import FreeIndex
from extender.core.holdings import HolderKind, Holding, Shortfall
from extender.core.nodeview import (
    EMPTY,
    NodeView,
    check_above_allocated,
    check_unheld,
    first_shortfall,
    present,
)
from extender.core.objects import Taint
from extender.core.snapshot import Snapshot, Totals

# The ledger's vocabulary, importable from here as its callers always have.
__all__ = [
    "HolderKind",
    "Holding",
    "Ledger",
    "NodeView",
    "Shortfall",
    "Snapshot",
    "Totals",
    "check_above_allocated",
    "check_unheld",
]


Listener = Callable[[int, frozenset[str]], None]


class Ledger:
    """Thread-safe; every public method is atomic; only snapshot() and holders_on() among the
    reads take the lock."""

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
        # The free indexes (per resource and node: free units, capacities, rankings, scores;
        # physical room), brought up to date with every view under the lock.
        self._index = FreeIndex(self._lock, lambda: self._version)
        # Node -> reservation holdings on it: ReservationFit checks only these nodes.
        self._reserved: dict[str, int] = {}
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

    # ---- observation (no lock, but in snapshot) ---------------------------------------------

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
        return bool(self._index.free.get(resource))

    def most_used(self, resource: str, nodes: Sequence[str]) -> str | None:
        """The one of `nodes` with the most units of `resource` in use (FreeIndex.most_used)."""
        return self._index.most_used(resource, nodes)

    def ranking(self, resource: str) -> Sequence[tuple[int, str]]:
        """The nodes having `resource` as (-used, name), the fullest first (FreeIndex.ranking:
        live, read it without keeping it)."""
        return self._index.ranking(resource)

    def nodes_with(self, resource: str) -> Mapping[str, int]:
        """Free units of an ephemeral resource, per node that has it (a live read-only view:
        copy it before iterating while others may change the ledger)."""
        return self._index.free.get(resource, {})

    def reserved_nodes(self) -> Mapping[str, int]:
        """Nodes holding reservations (and how many); empty when there are none."""
        return self._reserved

    def totals(self) -> Totals:
        return Totals(self._version, len(self._nodes), len(self._index.free), dict(self._kinds))

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
            free = self._index.free.get(res, {})
            for name in nodes:
                if free.get(name, 0) < want:
                    out[name] = self._shortfall(name, res, want)
            return out
        for name in nodes:
            for res, want in items:
                if self._index.free.get(res, {}).get(name, 0) < want:
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
        """NodeResourcesFit's LeastAllocated over the ledger, per node, zeros left out
        (FreeIndex.least_allocated: for one resource a live cache, read it with `get`)."""
        return self._index.least_allocated(nodes, request, top)

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
            room = self._index.room.get(res)
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
            short = first_shortfall(view, amounts, credit, self.prefix, physical=False)
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
                short = first_shortfall(view, per, credit.get(node, {}), self.prefix, physical=True)
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
            self._index.update(res, view.name, view.ephemeral.get(res), view.used.get(res, 0))
        self._index.update_room(view.name, view.physical, view.used, old.physical if old else EMPTY)

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
        self._index.update(resource, node, cap or None, view.used.get(resource, 0))
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
                present(ephemeral) if ephemeral is not None else dict(old.ephemeral if old else {})
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
        shown = present(ephemeral)
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
            self._index.update_room(name, EMPTY, EMPTY, view.physical)
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
            nodes = list(self._index.free.get(resource, {}))
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
