"""All-or-nothing gang scheduling over the ledger. Pure Python, no I/O.

A gang is declared on its pods (docs/gangs.md): label `<domain>/gang: <name>` (or
scheduler-plugins' `scheduling.x-k8s.io/pod-group: <name>`), annotation `<domain>/gang-min`
(the minimum members) and optionally `<domain>/gang-timeout` (seconds, default 60).

How all-or-nothing holds although kube-scheduler places one pod at a time and binds
asynchronously:
1. WAITING: members are learnt as kube-scheduler filters them. Until `min` members are
   known, every member is rejected (a resolvable reason) and holds nothing, so early members
   never keep resources another gang needs.
2. When the min-th member is filtered, a place for every member is planned over the nodes
   that passed kube-scheduler's own filters, and reserved in the ledger in one atomic step
   (`Ledger.reserve`, which checks cpu/memory/pods too). If it does not fit, nothing is held:
   two gangs that cannot both fit never deadlock, the one that reserves first completes.
   Reservations bind ordinary pods too: while any exists the filter checks their physical
   fit against the ledger (extender.filters.reservation).
3. RESERVED: each member passes only its reserved node. The other members are woken (their
   pods are annotated with their reserved node, which is also what makes a reservation
   survive a restart) so kube-scheduler retries them at once.
4. Bind is a barrier (extender.verbs): a member's bind converts its reservation into an
   assumed holding and waits until every member has reached bind; then all are bound. A
   member that waits too long gives its place back to the reservation and is retried.
5. A reservation not completed within the timeout is released and the gang starts over.
Called by the gang filter plugin and by extender.verbs (bind) with the ledger's lock-free
snapshots; the caller executes the returned wake-ups.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from extender.decisions import PodInfo, Rejection
from extender.ledger import HolderKind, Ledger, NodeView

COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
DEFAULT_TIMEOUT = 60.0


class InvalidGang(ValueError):
    """A gang declaration that cannot be honoured; the message names the gang."""


@dataclass(frozen=True)
class GangSpec:
    namespace: str
    name: str
    min_members: int
    timeout: float

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Keys:
    """The label and annotation names under the resource domain."""

    gang: str
    min: str
    timeout: str
    node: str  # written by the extender: the member's reserved node
    until: str  # written by the extender: when the reservation expires (unix seconds)

    @classmethod
    def for_domain(cls, domain: str) -> Keys:
        return cls(
            *(
                f"{domain}/{k}"
                for k in ("gang", "gang-min", "gang-timeout", "gang-node", "gang-reserved-until")
            )
        )


def gang_of(pod: PodInfo, keys: Keys) -> GangSpec | None:
    """The gang `pod` declares, None if none. Raises InvalidGang naming the gang."""
    name = pod.labels.get(keys.gang) or pod.labels.get(COSCHEDULING_LABEL)
    if not name:
        return None
    key = f"{pod.namespace}/{name}"
    raw_min = pod.annotations.get(keys.min)
    if raw_min is None:
        raise InvalidGang(f"gang {key}: pod {pod.name} has no {keys.min} annotation")
    try:
        min_members = int(raw_min)
        timeout = float(pod.annotations.get(keys.timeout, DEFAULT_TIMEOUT))
    except ValueError:
        raise InvalidGang(
            f"gang {key}: pod {pod.name} has a non-numeric {keys.min} or {keys.timeout}"
        ) from None
    if min_members < 1 or not 0 < timeout <= 86_400:
        raise InvalidGang(f"gang {key}: {keys.min} must be >= 1 and {keys.timeout} in (0, 86400]")
    return GangSpec(pod.namespace, name, min_members, timeout)


class Phase(StrEnum):
    WAITING = "waiting"
    RESERVED = "reserved"
    COMPLETE = "complete"


@dataclass(frozen=True)
class Wake:
    """Annotate a member's pod with its reserved node (None: remove) and expiry."""

    uid: str
    namespace: str
    name: str
    node: str | None
    until: float | None


@dataclass
class Gang:
    spec: GangSpec
    phase: Phase = Phase.WAITING
    members: dict[str, PodInfo] = field(default_factory=dict)  # uid -> pod, arrival order
    reserved: dict[str, str] = field(default_factory=dict)  # uid -> node
    at_bind: set[str] = field(default_factory=set)
    bound: set[str] = field(default_factory=set)
    expires: float = 0.0  # wall clock (time.time()), so it survives a restart
    reason: str = ""
    reservations: int = 0
    timeouts: int = 0


def plan(
    members: Sequence[PodInfo],
    nodes: Sequence[str],
    views: Mapping[str, NodeView],
    prefix: str,
    empty: bool = False,
) -> list[tuple[str, str, Mapping[str, int]]] | None:
    """A node for each member (first fit over the nodes with most free cpu), or None.

    `empty`: plan as if nothing were held (does the gang fit this cluster at all?).
    """
    free: dict[str, dict[str, int]] = {}
    for n in nodes:
        view = views.get(n)
        if view is None:
            continue
        caps = {**view.physical, **view.ephemeral}
        free[n] = {r: c - (0 if empty else view.used.get(r, 0)) for r, c in caps.items()}
    order = sorted(free, key=lambda n: (-free[n].get("cpu", 0), n))
    places: list[tuple[str, str, Mapping[str, int]]] = []
    for m in members:
        for n in order:
            room = free[n]
            if all(
                room.get(r, 0) >= v
                for r, v in m.amounts.items()
                if r in room or r.startswith(prefix)
            ):
                for r, v in m.amounts.items():
                    if r in room:
                        room[r] -= v
                places.append((m.uid, n, m.amounts))
                break
        else:
            return None
    return places


class GangBook:
    """Every gang the extender has seen, and the decisions about them. Thread-safe."""

    def __init__(self, ledger: Ledger, keys: Keys, clock: Callable[[], float] = time.time):
        self.ledger = ledger
        self.keys = keys
        self.clock = clock
        self._gangs: dict[str, Gang] = {}
        self._lock = threading.RLock()

    def gangs(self) -> list[Gang]:
        with self._lock:
            return list(self._gangs.values())

    def gang(self, key: str) -> Gang | None:
        return self._gangs.get(key)

    # ---- filter ----------------------------------------------------------------------------

    def filter(
        self, pod: PodInfo, spec: GangSpec, nodes: Sequence[str]
    ) -> tuple[dict[str, Rejection], list[Wake]]:
        """Which of `nodes` a gang member may not use now, and the wake-ups to send."""
        with self._lock:
            g = self._gangs.setdefault(spec.key, Gang(spec))
            if spec.min_members != g.spec.min_members:
                first = next(iter(g.members.values()), None)
                why = (
                    f"gang {spec.key}: members disagree on its size: pod {pod.name} says "
                    f"min {spec.min_members}, {first.name if first else 'others'} said "
                    f"{g.spec.min_members}"
                )
                return _all(nodes, why, unresolvable=True), []
            wakes = self._expire(g)
            if g.phase is Phase.COMPLETE:
                return {}, wakes  # further members are ordinary pods
            g.members.setdefault(pod.uid, pod)
            if g.phase is Phase.RESERVED:
                return self._reserved_filter(g, pod, nodes), wakes
            if len(g.members) < spec.min_members:
                g.reason = (
                    f"gang {spec.key} waiting for members: {len(g.members)} of "
                    f"{spec.min_members} seen"
                )
                return _all(nodes, g.reason), wakes
            return self._try_reserve(g, pod, nodes, wakes)

    def _try_reserve(
        self, g: Gang, pod: PodInfo, nodes: Sequence[str], wakes: list[Wake]
    ) -> tuple[dict[str, Rejection], list[Wake]]:
        spec = g.spec
        # The member being filtered first, then the earliest others.
        others = [m for uid, m in g.members.items() if uid != pod.uid]
        members = [pod, *others][: spec.min_members]
        snap = self.ledger.snapshot()
        prefix = self.ledger.prefix
        places = plan(members, nodes, snap.nodes, prefix)
        if places is None or self.ledger.reserve(spec.key, places) is not None:
            if plan(members, list(snap.nodes), snap.nodes, prefix, empty=True) is None:
                g.reason = (
                    f"gang {spec.key} can never fit: {spec.min_members} members of "
                    f"{_fmt(pod.amounts)} exceed what the cluster's nodes hold"
                )
                return _all(nodes, g.reason, unresolvable=True), wakes
            g.reason = f"gang {spec.key} (min {spec.min_members}) does not fit now"
            return _all(nodes, g.reason), wakes
        g.phase = Phase.RESERVED
        g.reserved = {uid: node for uid, node, _ in places}
        g.expires = self.clock() + spec.timeout
        g.reservations += 1
        g.reason = ""
        for m in members:
            wakes.append(Wake(m.uid, m.namespace, m.name, g.reserved[m.uid], g.expires))
        return self._reserved_filter(g, pod, nodes), wakes

    @staticmethod
    def _reserved_filter(g: Gang, pod: PodInfo, nodes: Sequence[str]) -> dict[str, Rejection]:
        node = g.reserved.get(pod.uid)
        if node is None:
            why = f"gang {g.spec.key} is reserved for its first {g.spec.min_members} members"
            return _all(nodes, why)
        why = f"gang {g.spec.key} reserved node {node} for this pod"
        return {n: Rejection(why) for n in nodes if n != node}

    # ---- bind (the barrier) ----------------------------------------------------------------

    def arrive(self, key: str, uid: str, node: str) -> tuple[bool, str]:
        """A member reached bind on `node`: (everyone is here, error if it may not bind)."""
        with self._lock:
            g = self._gangs.get(key)
            if g is None or g.phase is Phase.COMPLETE:
                return True, ""
            if g.phase is not Phase.RESERVED or g.reserved.get(uid) != node:
                return False, f"gang {key}: no reservation for this pod on {node}"
            pod = g.members[uid]
            short = self.ledger.hold(uid, node, pod.amounts, HolderKind.ASSUMED, owner=key)
            if short is not None:
                return False, f"gang {key}: {short.detail}"
            g.at_bind.add(uid)
            return len(g.at_bind) >= g.spec.min_members, ""

    def leave(self, key: str, uid: str) -> None:
        """A member gave up waiting at the barrier: its place goes back to the reservation."""
        with self._lock:
            g = self._gangs.get(key)
            if g is None or uid not in g.at_bind:
                return
            g.at_bind.discard(uid)
            node = g.reserved[uid]
            self.ledger.reserve(key, [(uid, node, g.members[uid].amounts)])

    def ready(self, key: str) -> bool:
        with self._lock:
            g = self._gangs.get(key)
            return g is None or len(g.at_bind) >= g.spec.min_members

    def bound(self, key: str, uid: str) -> bool:
        """A member is bound; True once the whole gang is."""
        with self._lock:
            g = self._gangs.get(key)
            if g is None:
                return False
            g.bound.add(uid)
            if len(g.bound) >= g.spec.min_members:
                g.phase = Phase.COMPLETE
                g.at_bind.clear()
            return g.phase is Phase.COMPLETE

    # ---- time and restarts ------------------------------------------------------------------

    def expire(self) -> list[Wake]:
        """Release every reservation past its timeout; returns the wake-ups (un-annotate)."""
        with self._lock:
            return [w for g in self._gangs.values() for w in self._expire(g)]

    def _expire(self, g: Gang) -> list[Wake]:
        if g.phase is not Phase.RESERVED or self.clock() < g.expires or g.at_bind:
            return []
        for uid in g.reserved:
            self.ledger.release(uid)
        wakes = [
            Wake(uid, g.members[uid].namespace, g.members[uid].name, None, None)
            for uid in g.reserved
            if uid in g.members
        ]
        g.phase = Phase.WAITING
        g.reserved = {}
        g.timeouts += 1
        g.reason = f"gang {g.spec.key}: reservation expired after {g.spec.timeout:g}s"
        return wakes

    def restore(self, pod: PodInfo, spec: GangSpec, node: str, until: float) -> None:
        """Rebuild a member's reservation from its pod's annotations after a restart."""
        with self._lock:
            g = self._gangs.setdefault(spec.key, Gang(spec))
            g.members[pod.uid] = pod
            if until <= self.clock():
                return
            if self.ledger.reserve(spec.key, [(pod.uid, node, pod.amounts)]) is None:
                g.phase = Phase.RESERVED
                g.reserved[pod.uid] = node
                g.expires = max(g.expires, until)

    def forget(self, uid: str) -> None:
        """A member's pod is gone: drop it (and its reservation) from its gang."""
        with self._lock:
            for g in self._gangs.values():
                if g.members.pop(uid, None) is not None:
                    g.at_bind.discard(uid)
                    if g.reserved.pop(uid, None) is not None:
                        self.ledger.release(uid)


def _all(nodes: Sequence[str], reason: str, unresolvable: bool = False) -> dict[str, Rejection]:
    r = Rejection(reason, unresolvable)
    return dict.fromkeys(nodes, r)


def _fmt(amounts: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(amounts.items()))
