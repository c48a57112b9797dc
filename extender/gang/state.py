"""A gang's state as the manager keeps it: its members, its reserved places, its phase, and
what a member's arrival at bind comes to.

One writer: a GangState changes only through its own methods, each named for what happens
to the gang (learn, forget, reserve, move, pass_filter, bind, bound, release, back_off,
complete...), and they keep its indexes (a member's place, the members landed) true to what
they index. The planner (extender.gang.planning) and the nominations
(extender.gang.nominations) only read it and return what should change (a Reservation, a
Wait, the nominations due); tests/unit/gang/test_one_writer.py pins the rule.

Made and changed by the gang manager (extender.gang.manager) on the event loop; read by the
gang gate, the status route (extender.gang.status) and the bind verb (through `Arrival`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum

from msgspec import Struct

from extender.core.constraints import Constraints
from extender.core.pod import PodInfo
from extender.gang.barrier import Barrier
from extender.gang.spec import GangSpec

NO_NODES: frozenset[str] = frozenset()  # shared by every member kube-scheduler refused nowhere


class Phase(StrEnum):
    WAITING = "waiting"  # no places held: members are turned away, with why
    RESERVED = "reserved"  # a place held for every member still to be bound
    BOUND = "bound"  # the minimum is bound: further members are ordinary pods


class Member(Struct, gc=False):
    """A member as its gang knows it. Not tracked by the garbage collector: one per member
    of every gang held (a gang of 1,024 has 1,024), and it refers only to untracked data
    (its PodInfo, strings, frozensets of node names), never back to its gang."""

    pod: PodInfo
    # When it was first learnt from a filter call and not yet from the pod informer
    # (monotonic); None once the informer confirmed it exists.
    unconfirmed_since: float | None = None
    # Where kube-scheduler found it feasible (kept only when its constraints are ones the
    # extender cannot evaluate), and the nodes kube-scheduler refused it since: replaced,
    # never changed in place, so a plan made off the loop can take it as it is.
    feasible: frozenset[str] | None = None
    excluded: frozenset[str] = NO_NODES

    @property
    def bound(self) -> bool:
        return bool(self.pod.node)

    @property
    def constraints(self) -> Constraints | None:
        return self.pod.constraints


class Slot(Struct, gc=False):
    """One reserved place. `holder` is its ledger holding; `member` the uid it is for
    (None: a member not created yet). `amounts` is shared, never changed: the places of a
    gang's members to come all refer to the one mapping they were planned with.

    Not tracked by the garbage collector, as the ledger's Holding is not: there is one per
    reserved member, and it refers only to strings and a dict of ints (no cycle)."""

    holder: str
    node: str
    amounts: Mapping[str, int]
    member: str | None = None


class Outcome(Enum):
    """What planning a gang came to."""

    RESERVED = "reserved"  # a place is held for every member still to be bound
    WAITING = "waiting"  # it does not fit now (or may not be planned yet): reason says why
    NEVER = "never"  # it cannot fit even on empty nodes


@dataclass(frozen=True, slots=True)
class Reservation:
    """A plan that fitted, as its gang takes it (GangState.reserve; made by
    extender.gang.planning): its places, already held in the ledger, in the plan's order; the
    members the first places are for, in that order (a place whose member went or was bound
    meanwhile waits for a member to come); until when it holds (monotonic), when it was made
    (wall clock), and what the gang still waits for ("": nothing)."""

    slots: tuple[Slot, ...]
    members: tuple[str, ...]
    expires: float
    at: float
    reason: str


@dataclass
class GangState:
    """One gang as the manager knows it, from its first member to its last."""

    spec: GangSpec
    generation: int
    members: dict[str, Member] = field(default_factory=dict)  # uid -> member, arrival order
    phase: Phase = Phase.WAITING
    # Its reserved places by holder (their ledger holdings), in the plan's order; and the
    # holder of each member's place. Dicts of strings and Slots, which the garbage collector
    # does not track (a list of a gang's 1,024 places was walked entry by entry by every
    # collection), and a member's place is one lookup: its filter, its arrival at bind and
    # its Binding each ask, and a gang of 1,024's bind burst asked 1,024 times at once.
    slots: dict[str, Slot] = field(default_factory=dict)
    places: dict[str, str] = field(default_factory=dict)
    # Members bound or whose Binding was created: what the minimum counts, kept as it changes.
    landed: dict[str, None] = field(default_factory=dict)
    barrier: Barrier | None = None
    expires: float = 0.0  # monotonic: when the reservation is released if incomplete
    # How far its reservation has come (GangState.progress) at the expiry ticks since it was
    # made: the highest seen, None before the first tick. A tick that sees it higher puts
    # `expires` a whole timeout later (GangState.hold_on).
    progress_mark: int | None = None
    retry_at: float = 0.0  # monotonic: no new reservation before (backoff)
    attempts: int = 0  # reservations made
    timeouts: int = 0
    reason: str = ""
    # Bumped whenever a member is learnt or forgotten: a plan that failed is worth trying
    # again (the gang gate keys its retries on it).
    roster: int = 0
    # Its last plan found no room now (it may fit later): the cluster is short of room for
    # gangs, which the adaptive gang gate reads (GangManager.short_of_room; the fuzz tier
    # checks the two agree).
    short: bool = False
    # Bumped when its places are given back: a plan made before is void.
    epoch: int = 0
    # The plan running off the loop (extender.gang.planning), until it is applied.
    planning: asyncio.Task[Outcome] | None = None
    # Members whose Binding was created and that the informer has not reported bound yet.
    committed: set[str] = field(default_factory=set)
    # Members whose filter passed their reserved node, in this reservation.
    passed: set[str] = field(default_factory=set)
    # Members whose reserved node was written to their status.nominatedNodeName (uid -> node),
    # and those the pod watch has shown with it since.
    nominated: dict[str, str] = field(default_factory=dict)
    seen_nominated: set[str] = field(default_factory=set)
    # Its timeline, in wall-clock seconds (comparable with other processes' clocks): when
    # it was first learnt, last reserved, when its minimum had last all passed filter to
    # their places, and when it was last all at bind.
    # Logged once the gang is bound (`gang bound`), for `bench gang-timeline`.
    learnt_at: float = 0.0
    reserved_at: float | None = None
    filtered_at: float | None = None
    ready_at: float | None = None

    @property
    def key(self) -> str:
        return self.spec.key

    def timeline(self, bound_at: float) -> dict[str, object]:
        """What the `gang bound` log line says (read by bench gang-timeline)."""
        return {
            "gang": self.key,
            "generation": self.generation,
            "members": self.spec.min_members,
            "reservations": self.attempts,
            "learnt_at": self.learnt_at,
            "reserved_at": self.reserved_at,
            "filtered_at": self.filtered_at,
            "ready_at": self.ready_at,
            "bound_at": bound_at,
        }

    def bound_count(self) -> int:
        return len(self.landed)

    def placed_count(self) -> int:
        """Members bound, binding, or passed by filter to their reserved places."""
        return len(self.landed.keys() | (self.passed & self.members.keys()))

    def ready(self) -> bool:
        """Whether the minimum is bound or waiting at the barrier: it may open."""
        at_bind = len(self.barrier.waiting) if self.barrier is not None else 0
        return self.bound_count() + at_bind >= self.spec.min_members

    def open_barrier(self, wall: Callable[[], float]) -> None:
        assert self.barrier is not None
        if not self.barrier.is_open:
            self.ready_at = wall()
        self.barrier.open()

    def place_of(self, uid: str) -> Slot | None:
        """Member `uid`'s reserved place, if it has one."""
        holder = self.places.get(uid)
        return None if holder is None else self.slots.get(holder)

    # ---- its members -----------------------------------------------------------------------

    def learn(self, pod: PodInfo, unconfirmed_since: float | None) -> tuple[Member, bool]:
        """Member `pod` as it is now: new (learnt from a filter call at `unconfirmed_since`,
        or from the informer when None), or its pod replaced, though a stale filter request
        must not unbind it; the informer confirms it when `unconfirmed_since` is None. Returns
        the member, and whether it is newly seen bound (`bound` is to follow)."""
        m = self.members.get(pod.uid)
        was_bound = m is not None and m.bound
        if m is None:
            m = self.members[pod.uid] = Member(pod, unconfirmed_since=unconfirmed_since)
            self.roster += 1
        else:
            if pod.node or not was_bound:
                m.pod = pod
            if unconfirmed_since is None:
                m.unconfirmed_since = None
        return m, m.bound and not was_bound

    def forget(self, uid: str) -> None:
        """Member `uid` is gone: its place waits for another."""
        self.members.pop(uid, None)
        self.roster += 1
        self.committed.discard(uid)
        self.passed.discard(uid)
        self.landed.pop(uid, None)
        self.forget_nomination(uid)
        holder = self.places.pop(uid, None)
        slot = self.slots.get(holder) if holder is not None else None
        if slot is not None:
            slot.member = None

    def redeclare(self, spec: GangSpec) -> None:
        """Its declaration changed (its places given back first): a plan is worth trying."""
        self.spec = spec
        self.roster += 1

    def offered(self, m: Member, nodes: Iterable[str]) -> None:
        """kube-scheduler offered member `m` `nodes`: where it found m feasible."""
        m.feasible = frozenset(nodes)

    def exclude(self, m: Member, node: str) -> None:
        """kube-scheduler refused member `m` `node`: no plan puts it there again."""
        m.excluded = m.excluded | {node}

    # ---- its reservation -------------------------------------------------------------------

    def start_plan(self, task: asyncio.Task[Outcome]) -> None:
        """A plan of it runs off the loop: members asking meanwhile wait for it."""
        self.planning = task

    def end_plan(self) -> None:
        self.planning = None

    def wait(self, reason: str, short: bool | None = None) -> None:
        """It is not reserved now, for `reason`; `short`: whether for room (None: as it was)."""
        self.reason = reason
        if short is not None:
            self.short = short

    def reserve(self, r: Reservation) -> None:
        """It holds the places of `r`, and a new barrier for its members."""
        for uid, s in zip(r.members, r.slots, strict=False):
            m = self.members.get(uid)
            if m is not None and not m.bound:  # else its place waits for a member to come
                s.member = uid
        self.slots = {s.holder: s for s in r.slots}
        self.places = {s.member: s.holder for s in self.slots.values() if s.member is not None}
        self.phase = Phase.RESERVED
        self.attempts += 1
        self.expires = r.expires
        self.progress_mark = None
        self.reserved_at = r.at
        self.filtered_at = None
        self.passed = set()
        self.barrier = Barrier()
        self.reason = r.reason
        self.short = False

    def assign(self, slot: Slot, uid: str) -> None:
        """Place `slot`, kept for a member to come, is member `uid`'s."""
        slot.member = uid
        self.places[uid] = slot.holder

    def move(self, slot: Slot, node: str) -> None:
        """Place `slot` moved to `node` (held there in the ledger): its nomination is void."""
        slot.node = node
        if slot.member is not None:
            self.forget_nomination(slot.member)

    def pass_filter(self, uid: str, wall: Callable[[], float]) -> None:
        """Member `uid`'s filter passed its reserved node; notes when its minimum first all
        had (the count is over the members, a cheap bound first: a filter per member)."""
        self.passed.add(uid)
        need = self.spec.min_members
        if (
            self.filtered_at is None
            and len(self.passed) + len(self.landed) >= need
            and self.placed_count() >= need
        ):
            self.filtered_at = wall()

    def progress(self) -> int:
        """How far its reservation has come: members known, passed to their places, at bind
        and landed. Each part is bounded by the members, so it cannot grow for ever."""
        at_bind = len(self.barrier.waiting) if self.barrier is not None else 0
        return len(self.members) + len(self.passed) + at_bind + len(self.landed)

    def hold_on(self, now: float) -> None:
        """An expiry tick at `now`: a reservation that came further than at every earlier
        tick holds a whole timeout from now. So its timeout bounds a stall, not the whole
        gathering: a gang of 10,000 whose members take minutes to be created and pass their
        cycles keeps its places while they come, and one whose members stop coming is
        released `timeout` after the last came. The first tick only takes the measure;
        members a bind retry brings back count once, under the highest mark."""
        now_at = self.progress()
        if self.progress_mark is not None and now_at > self.progress_mark:
            self.expires = now + self.spec.timeout
        if self.progress_mark is None or now_at > self.progress_mark:
            self.progress_mark = now_at

    def back_off(self, now: float, backoff: tuple[float, float]) -> None:
        """Its reservation timed out: no new one before an exponential backoff, and what
        kube-scheduler refused its members then may fit next time."""
        self.timeouts += 1
        for m in self.members.values():
            m.excluded = NO_NODES
        lo, hi = backoff
        self.retry_at = now + min(hi, lo * 2 ** (self.timeouts - 1))

    def release(self, why: str) -> dict[str, Slot]:
        """Its places are given back (returned, by holder, for the ledger), its nominations
        dropped and its barrier's waiters woken with `why`; a plan made before is void."""
        self.epoch += 1
        held = self.slots
        if held:
            self.slots = {}
            self.places = {}
        self.passed = set()
        self.nominated = {}
        self.seen_nominated = set()
        if self.barrier is not None:
            self.barrier.cancel(why or f"gang {self.key} was released")
            self.barrier = None
        if self.phase is Phase.RESERVED:
            self.phase = Phase.WAITING
        if why:
            self.reason = why
        return held

    def complete(self) -> None:
        """Its minimum is bound (its places given back): further members are ordinary pods."""
        self.phase = Phase.BOUND
        self.reason = ""
        self.short = False

    # ---- bind ------------------------------------------------------------------------------

    def bind(self, uid: str) -> Slot | None:
        """Member `uid`'s Binding was created: its place (returned) leaves the reservation,
        to be the pod's own until the informer reports it bound."""
        self.committed.add(uid)
        return self._landed(uid)

    def bound(self, uid: str) -> Slot | None:
        """Member `uid` is seen bound: its place (returned) is the bound pod now."""
        self.committed.discard(uid)
        return self._landed(uid)

    def _landed(self, uid: str) -> Slot | None:
        self.landed[uid] = None
        self.forget_nomination(uid)
        holder = self.places.pop(uid, None)
        return None if holder is None else self.slots.pop(holder, None)

    # ---- nominations (extender.gang.nominations decides them) ------------------------------

    def nominate(self, uid: str, node: str) -> None:
        """`node` was written (or is to be, a moment later) to member `uid`'s nomination."""
        self.nominated[uid] = node

    def nomination_seen(self, uid: str) -> None:
        """The pod watch showed member `uid` with its nomination."""
        self.seen_nominated.add(uid)

    def forget_nomination(self, uid: str) -> None:
        """Member `uid`'s nomination is not the gang's to keep (bound, binding, gone, moved,
        or cleared by kube-scheduler)."""
        self.nominated.pop(uid, None)
        self.seen_nominated.discard(uid)

    def withdraw_nomination(self, uid: str, node: str) -> None:
        """Member `uid`'s delayed nomination of `node` is not written after all: it is no
        longer recorded, so nothing clears it."""
        if self.nominated.get(uid) == node:
            del self.nominated[uid]


@dataclass(frozen=True, slots=True)
class Ticket:
    """A member's place at its gang's barrier: wait on it, then bind."""

    barrier: Barrier
    gang: str


@dataclass(frozen=True, slots=True)
class Refused:
    """A member that may not bind where it asked; `reason` says why."""

    reason: str


# What `arrive` answers: wait at the barrier, refuse, or None: an ordinary pod (of no gang,
# or of a gang already bound) that binds as any other.
Arrival = Ticket | Refused | None
