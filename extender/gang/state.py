"""A gang's state as the manager keeps it: its members, its reserved places, its phase, and
what a member's arrival at bind comes to. Plain data, and the few helpers that keep its
indexes (a member's place) true to what they index.

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

    def back_off(self, now: float, backoff: tuple[float, float]) -> None:
        """Its reservation timed out: no new one before an exponential backoff, and what
        kube-scheduler refused its members then may fit next time."""
        self.timeouts += 1
        for m in self.members.values():
            m.excluded = NO_NODES
        lo, hi = backoff
        self.retry_at = now + min(hi, lo * 2 ** (self.timeouts - 1))

    def place_of(self, uid: str) -> Slot | None:
        """Member `uid`'s reserved place, if it has one."""
        holder = self.places.get(uid)
        return None if holder is None else self.slots.get(holder)

    def assign(self, slot: Slot, uid: str) -> None:
        slot.member = uid
        self.places[uid] = slot.holder

    def vacate(self, uid: str) -> None:
        """Member `uid` is gone: its place waits for another."""
        holder = self.places.pop(uid, None)
        slot = self.slots.get(holder) if holder is not None else None
        if slot is not None:
            slot.member = None

    def take(self, uid: str) -> Slot | None:
        """Member `uid`'s place leaves the reservation (it is the member's pod now)."""
        holder = self.places.pop(uid, None)
        return None if holder is None else self.slots.pop(holder, None)

    def hold(self, slots: Iterable[Slot]) -> None:
        """The places of a new reservation (those with a member are its)."""
        self.slots = {s.holder: s for s in slots}
        self.places = {s.member: s.holder for s in self.slots.values() if s.member is not None}

    def unhold(self) -> None:
        self.slots = {}
        self.places = {}


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
