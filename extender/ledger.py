"""The ledger: ephemeral resources per node and what holds them. Pure Python, no I/O.

Per node it keeps the physical allocatable (cpu, memory, pods, other extended resources, as
the cluster view reports it) and the ephemeral resources the policy API created (full name ->
capacity). Holders take amounts of both on one node: a pod (by uid) that is bound, or one that
the extender has accepted for binding but the API server has not yet confirmed (bind is
asynchronous, so several may be in flight), or a reservation (a gang's held places).

Invariant: no decision taken here lets an ephemeral resource on a node go over capacity.
Every change is atomic (all of it or none of it, under one lock) and bumps `version`.
Observations of what the cluster already did (a pod bound by plain kube-scheduler) are
recorded as facts even when they exceed capacity; they then block further placements.

Called by the HTTP routes and filters (decisions, policy changes), the cluster view (facts
from the API server) and the write-back (snapshots to persist).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum


class HolderKind(StrEnum):
    POD = "pod"  # bound, as observed from the API server
    ASSUMED = "assumed"  # accepted for binding, not yet observed bound
    RESERVATION = "reservation"  # places held for a pod that has not arrived yet


@dataclass(frozen=True)
class Holding:
    """Amounts that one holder takes on one node."""

    holder: str
    node: str
    amounts: Mapping[str, int]
    kind: HolderKind
    # Free-form owner key (for reservations, the gang's key) so a group can be released.
    owner: str = ""


@dataclass(frozen=True)
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


class LedgerError(Exception):
    """A policy change the ledger refuses; nothing was applied."""


class UnknownNode(LedgerError):
    def __init__(self, nodes: Iterable[str]) -> None:
        self.nodes = sorted(nodes)
        super().__init__(f"unknown node(s): {', '.join(self.nodes)}")


class BelowAllocated(LedgerError):
    """Capacity lowered below what is held (other than to 0, which removes the resource)."""

    def __init__(self, problems: list[tuple[str, str, int, int]]) -> None:
        self.problems = problems
        super().__init__(
            "; ".join(
                f"{node}: {res} capacity {cap} is below the {held} already allocated"
                for node, res, cap, held in problems
            )
        )


@dataclass
class _Node:
    labels: dict[str, str] = field(default_factory=dict)
    physical: dict[str, int] = field(default_factory=dict)
    ephemeral: dict[str, int] = field(default_factory=dict)
    used: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeView:
    """A consistent copy of one node."""

    labels: Mapping[str, str]
    physical: Mapping[str, int]
    ephemeral: Mapping[str, int]
    used: Mapping[str, int]

    def available(self, resource: str) -> int:
        cap = self.ephemeral.get(resource, self.physical.get(resource, 0))
        return max(0, cap - self.used.get(resource, 0))


@dataclass(frozen=True)
class Snapshot:
    """A consistent copy of the whole ledger at one version."""

    version: int
    nodes: Mapping[str, NodeView]
    holdings: Mapping[str, Holding]


class Ledger:
    """Thread-safe; every public method is atomic."""

    def __init__(self, domain: str = "escher.io") -> None:
        # Resources under this domain are ephemeral: the ledger decides them. Others (cpu,
        # memory, foreign extended resources) are only counted: kube-scheduler checks them.
        self.prefix = domain + "/"
        self._lock = threading.Lock()
        self._version = 0
        self._nodes: dict[str, _Node] = {}
        self._holdings: dict[str, Holding] = {}
        self._reserved = 0
        self._listeners: list[Callable[[int, frozenset[str]], None]] = []

    # ---- observation -------------------------------------------------------------------

    @property
    def version(self) -> int:
        return self._version

    def subscribe(self, listener: Callable[[int, frozenset[str]], None]) -> None:
        """Call `listener(version, nodes whose ephemeral capacity changed)` after changes.

        Called with the lock held: listeners must only record and wake, never block.
        """
        self._listeners.append(listener)

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(
                version=self._version,
                nodes={n: self._view(s) for n, s in self._nodes.items()},
                holdings=dict(self._holdings),
            )

    def node(self, name: str) -> NodeView | None:
        with self._lock:
            s = self._nodes.get(name)
            return None if s is None else self._view(s)

    def node_names(self) -> list[str]:
        with self._lock:
            return list(self._nodes)

    def holding(self, holder: str) -> Holding | None:
        return self._holdings.get(holder)

    def has_resource(self, resource: str) -> bool:
        with self._lock:
            return any(resource in s.ephemeral for s in self._nodes.values())

    @staticmethod
    def _view(s: _Node) -> NodeView:
        return NodeView(dict(s.labels), dict(s.physical), dict(s.ephemeral), dict(s.used))

    # ---- decisions ----------------------------------------------------------------------

    def shortfalls(self, nodes: Iterable[str], request: Mapping[str, int]) -> dict[str, Shortfall]:
        """For each node that cannot take `request` (ephemeral amounts), the first reason.

        The hot path of filter: one lock, plain dict lookups.
        """
        out: dict[str, Shortfall] = {}
        with self._lock:
            for name in nodes:
                s = self._nodes.get(name)
                if s is None:
                    res = next(iter(request))
                    out[name] = Shortfall(name, res, request[res], 0, 0)
                    continue
                for res, want in request.items():
                    cap = s.ephemeral.get(res, 0)
                    free = cap - s.used.get(res, 0)
                    if free < want:
                        out[name] = Shortfall(name, res, want, max(free, 0), cap)
                        break
        return out

    def free_fractions(self, nodes: Iterable[str], request: Mapping[str, int]) -> dict[str, float]:
        """Per node, the mean fraction of each requested resource left free after placing
        `request` (0.0 when it does not fit): the basis of least-allocated scoring."""
        out: dict[str, float] = {}
        if not request:
            return out
        wants = list(request.items())
        empty: dict[str, int] = {}
        with self._lock:
            get = self._nodes.get
            for name in nodes:
                s = get(name)
                eph, used = (s.ephemeral, s.used) if s is not None else (empty, empty)
                total = 0.0
                for res, want in wants:
                    cap = eph.get(res, 0)
                    if cap <= 0:
                        total = 0.0
                        break
                    left = cap - used.get(res, 0) - want
                    if left > 0:
                        total += left / cap
                out[name] = total / len(wants)
        return out

    def hold(
        self,
        holder: str,
        node: str,
        amounts: Mapping[str, int],
        kind: HolderKind = HolderKind.ASSUMED,
        owner: str = "",
    ) -> Shortfall | None:
        """Take `amounts` on `node` for `holder` if its ephemeral resources have room.

        Idempotent for the same holder on the same node; a holder moving to another node
        releases its old place in the same step. Returns the shortfall, or None when held.
        Only ephemeral resources are checked; the rest are counted.
        """
        with self._lock:
            s = self._nodes.get(node)
            if s is None:
                res = next(iter(amounts), "node")
                return Shortfall(node, res, amounts.get(res, 0), 0, 0)
            old = self._holdings.get(holder)
            same = old is not None and old.node == node and old.amounts == amounts
            if same and old is not None and old.kind in (kind, HolderKind.POD):
                return None  # already held (a bound pod stays the fact it is)
            credit = old.amounts if old is not None and old.node == node else {}
            for res, want in amounts.items():
                if not res.startswith(self.prefix):
                    continue
                cap = s.ephemeral.get(res, 0)
                free = cap - s.used.get(res, 0) + credit.get(res, 0)
                if free < want:
                    return Shortfall(node, res, want, max(free, 0), cap)
            self._put(Holding(holder, node, dict(amounts), kind, owner))
            return None

    def reserve(
        self, owner: str, places: Sequence[tuple[str, str, Mapping[str, int]]]
    ) -> Shortfall | None:
        """Hold every place (holder, node, amounts) as a reservation of `owner`, or none.

        Unlike `hold`, physical resources are checked too: a reservation is taken for pods
        kube-scheduler has not placed yet, so nothing else has checked them.
        """
        with self._lock:
            need: dict[str, dict[str, int]] = {}
            for holder, node, amounts in places:
                per = need.setdefault(node, {})
                for res, v in amounts.items():
                    per[res] = per.get(res, 0) + v
                old = self._holdings.get(holder)
                if old is not None and old.node == node:  # re-reserving: its own place counts
                    for res, v in old.amounts.items():
                        per[res] = per.get(res, 0) - v
            for node, per in need.items():
                s = self._nodes.get(node)
                if s is None:
                    return Shortfall(node, "node", 1, 0, 0)
                for res, want in per.items():
                    cap = (
                        s.ephemeral.get(res, 0)
                        if res.startswith(self.prefix)
                        else (s.physical.get(res, 0))
                    )
                    free = cap - s.used.get(res, 0)
                    if want > 0 and free < want:
                        return Shortfall(node, res, want, max(free, 0), cap)
            for holder, node, amounts in places:
                self._put(Holding(holder, node, dict(amounts), HolderKind.RESERVATION, owner))
            return None

    def physical_shortfalls(
        self, nodes: Iterable[str], amounts: Mapping[str, int]
    ) -> dict[str, Shortfall]:
        """Nodes whose physical allocatable, less everything held (reservations included),
        cannot take `amounts`. Resources a node does not report are not checked."""
        out: dict[str, Shortfall] = {}
        wants = [(r, v) for r, v in amounts.items() if not r.startswith(self.prefix)]
        with self._lock:
            for name in nodes:
                s = self._nodes.get(name)
                if s is None:
                    continue
                for res, want in wants:
                    cap = s.physical.get(res)
                    if cap is None:
                        continue
                    free = cap - s.used.get(res, 0)
                    if free < want:
                        out[name] = Shortfall(name, res, want, max(free, 0), cap)
                        break
        return out

    @property
    def reservations(self) -> int:
        """How many reservation holdings exist (0 keeps the filter's fast path)."""
        return self._reserved

    def observe_bound(self, holder: str, node: str, amounts: Mapping[str, int]) -> None:
        """Record a pod the API server reports bound to `node`: a fact, never refused.

        Replaces any assumed holding or reservation for the same holder.
        """
        with self._lock:
            old = self._holdings.get(holder)
            if (
                old is not None
                and old.kind is HolderKind.POD
                and old.node == node
                and old.amounts == amounts
            ):
                return
            self._put(Holding(holder, node, dict(amounts), HolderKind.POD))

    def release(self, holder: str) -> bool:
        with self._lock:
            if holder not in self._holdings:
                return False
            self._drop(holder)
            self._changed(frozenset())
            return True

    def release_owner(self, owner: str) -> int:
        """Release every holding of `owner` (e.g. all of a gang's reservations)."""
        with self._lock:
            holders = [h.holder for h in self._holdings.values() if h.owner == owner]
            for h in holders:
                self._drop(h)
            if holders:
                self._changed(frozenset())
            return len(holders)

    def _put(self, h: Holding) -> None:
        if h.holder in self._holdings:
            self._drop(h.holder)
        self._holdings[h.holder] = h
        if h.kind is HolderKind.RESERVATION:
            self._reserved += 1
        s = self._nodes.setdefault(h.node, _Node())
        for res, v in h.amounts.items():
            s.used[res] = s.used.get(res, 0) + v
        self._changed(frozenset())

    def _drop(self, holder: str) -> None:
        h = self._holdings.pop(holder)
        if h.kind is HolderKind.RESERVATION:
            self._reserved -= 1
        s = self._nodes.get(h.node)
        if s is None:
            return
        for res, v in h.amounts.items():
            left = s.used.get(res, 0) - v
            if left > 0:
                s.used[res] = left
            else:
                s.used.pop(res, None)

    # ---- nodes (facts from the cluster view) ---------------------------------------------

    def upsert_node(
        self,
        name: str,
        labels: Mapping[str, str],
        physical: Mapping[str, int],
        ephemeral: Mapping[str, int] | None = None,
    ) -> None:
        """Record a node's labels and physical allocatable.

        `ephemeral` is given only when rebuilding after a restart (the written-back values
        are the durable truth); otherwise the ledger's own ephemeral capacities stand.
        """
        with self._lock:
            s = self._nodes.setdefault(name, _Node())
            changed: frozenset[str] = frozenset()
            if ephemeral is not None and s.ephemeral != ephemeral:
                s.ephemeral = dict(ephemeral)
                changed = frozenset([name])
            if s.labels == labels and s.physical == physical and not changed:
                return
            s.labels = dict(labels)
            s.physical = dict(physical)
            self._changed(changed)

    def remove_node(self, name: str) -> None:
        with self._lock:
            if self._nodes.pop(name, None) is None:
                return
            for h in [h for h in self._holdings.values() if h.node == name]:
                self._drop(h.holder)
            self._changed(frozenset())

    def ensure_nodes(self, names: Iterable[str]) -> None:
        """Create empty nodes (the standalone mode learns nodes from requests only)."""
        with self._lock:
            new = [n for n in names if n not in self._nodes]
            for n in new:
                self._nodes[n] = _Node()
            if new:
                self._changed(frozenset())

    # ---- policy changes --------------------------------------------------------------------

    def set_capacity(self, resource: str, capacity: Mapping[str, int]) -> int:
        """Set `resource`'s capacity on each given node (0 removes it there). Atomic.

        Raises UnknownNode or BelowAllocated and applies nothing. Returns the new version.
        """
        if not resource.startswith(self.prefix):
            raise LedgerError(f"{resource} is not under {self.prefix} the ledger owns")
        with self._lock:
            missing = [n for n in capacity if n not in self._nodes]
            if missing:
                raise UnknownNode(missing)
            problems = [
                (n, resource, cap, self._nodes[n].used.get(resource, 0))
                for n, cap in capacity.items()
                if 0 < cap < self._nodes[n].used.get(resource, 0)
            ]
            if problems:
                raise BelowAllocated(problems)
            changed = []
            for n, cap in capacity.items():
                eph = self._nodes[n].ephemeral
                if eph.get(resource, 0) == cap:
                    continue
                if cap:
                    eph[resource] = cap
                else:
                    eph.pop(resource, None)
                changed.append(n)
            if changed:
                self._changed(frozenset(changed))
            return self._version

    def remove_resource(self, resource: str) -> list[str]:
        """Remove `resource` from every node; returns the nodes that had it."""
        with self._lock:
            nodes = [n for n, s in self._nodes.items() if s.ephemeral.pop(resource, None)]
            if nodes:
                self._changed(frozenset(nodes))
            return nodes

    def _changed(self, nodes: frozenset[str]) -> None:
        self._version += 1
        for listener in self._listeners:
            listener(self._version, nodes)
