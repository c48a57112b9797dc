"""One reservation attempt of a gang: made on the loop, run anywhere, applied on the loop.

The gang manager (extender.gang.manager) decides on the loop that a gang must be planned,
and `job()` copies into a PlanJob what the plan reads of its state (or returns a Wait: why it
is not planned now): each member still to be bound (its requests, constraints, and the nodes
kube-scheduler found feasible for it or refused it), how many members are still to be
created, the nodes offered, the topology. `run()` does the work that grows with nodes and
members: it reads the nodes' views (immutable, lock-free), plans (extender.gang.plan) and,
if the gang fits, reserves every place in the ledger in one atomic step (thread-safe). It
touches nothing else, so it may run in a worker thread: the manager runs a small job inline
and a large one (see Offload) in a thread, so that planning a gang of 1,024 over 5,000 nodes
in the background does not hold the loop. `decide()`, back on the loop, says what the result
comes to: the outcome, and what should change in the gang's state (a Reservation, or a Wait
with why), which the manager applies through GangState's methods; or it gives the places back
if the gang ended, was reserved or released meanwhile. Neither writes the gang's state. Pure
Python, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from extender.core.constraints import Constraints
from extender.core.ledger import Ledger, NodeView, Shortfall
from extender.gang.plan import Planned, Want, plan
from extender.gang.state import GangState, Member, Outcome, Phase, Reservation, Slot
from extender.gang.topology import Level, Placement


@dataclass(frozen=True, slots=True)
class Offload:
    """Above how much work (PlanJob.work: node visits plus members) a plan runs in a worker
    thread, by who asks for it.

    A plan costs about 0.6 us per node it visits and per member in process (3.5 ms for a
    gang of 1,024 over 5,000 nodes, its first member's whole filter), and a topology makes it
    visit the nodes more than once (see `passes`). The gang gate plans in the
    background, up to 64 gangs a turn, beside kube-scheduler's calls: off the loop above
    about a millisecond of planning. A first member's filter runs in kube-scheduler's
    scheduling cycle, which waits for it, so a plain gang of 1,024 over 5,000 nodes (11,024,
    packed) plans inline: in a thread the plan shares the interpreter with whatever the loop
    serves, and that first filter took twice as long (hack/gang-filter-latency.py;
    docs/results/gangs-planning-2026-11-25.md). A topology plan there (25,000 and more) runs in
    a thread: inline, in a 5,000-node benchmark, each held the loop 20-30 ms, and the other
    gangs' bind bursts with it."""

    background: int = 2_000
    filter: int = 20_000


DEFAULT_OFFLOAD = Offload()


@dataclass(frozen=True, slots=True)
class Part:
    """A member still to be bound, as the plan reads it (copied on the loop)."""

    uid: str
    amounts: Mapping[str, int]
    constraints: Constraints | None
    feasible: frozenset[str] | None  # where kube-scheduler found it feasible (None: anywhere)
    excluded: frozenset[str]  # where kube-scheduler refused it since


@dataclass(frozen=True, slots=True)
class Reserved:
    """Every place is held in the ledger: `slots`, one per want, the asking member's first."""

    slots: tuple[Slot, ...]


@dataclass(frozen=True, slots=True)
class NoRoom:
    """The gang does not fit now (`reason`); `never` says why it cannot fit even on empty
    nodes, when it cannot ("" when it could)."""

    reason: str
    never: str = ""


@dataclass(frozen=True, slots=True)
class Taken:
    """The plan fitted, but a concurrent change took part of its room before the reservation:
    nothing is held."""

    short: Shortfall


Result = Reserved | NoRoom | Taken


@dataclass(frozen=True, slots=True)
class Wait:
    """The gang is not reserved now, for `reason` (GangState.wait); `short`: whether it waits
    for room (None: as it was)."""

    reason: str
    short: bool | None = None


# What a plan's result changes in its gang: a reservation, a wait, or nothing (a void plan).
Change = Reservation | Wait | None


@dataclass(frozen=True, slots=True)
class PlanJob:
    """A reservation attempt for gang `key`: places for `parts` (the asking member first,
    its place among the nodes `offered` for it) and for `ghosts` members to come, shaped
    like the first part, on any node of the ledger (the offered ones tried first)."""

    key: str
    epoch: int  # the gang's, when asked: a release meanwhile voids the plan
    holders: str  # the places' holder names start with it
    parts: tuple[Part, ...]
    ghosts: int
    offered: Sequence[str]
    placement: Placement
    ledger: Ledger

    @property
    def work(self) -> int:
        """Roughly what the plan costs: the nodes times the passes over them, plus members."""
        return self.ledger.node_count() * passes(self.placement) + len(self.parts) + self.ghosts

    def run(self) -> Result:
        """Plan and reserve (any thread)."""
        wants = self._wants()
        views = self._views()
        prefix = self.ledger.prefix
        planned = plan(wants, views, prefix, placement=self.placement)
        if not isinstance(planned, Planned):
            never = plan(wants, views, prefix, empty=True, placement=self.placement)
            return NoRoom(planned.reason, "" if isinstance(never, Planned) else never.reason)
        places = planned.places
        slots = tuple(
            Slot(f"{self.holders}/{i}", places[w.ref], w.amounts, None) for i, w in enumerate(wants)
        )
        short = self.ledger.reserve([(s.holder, s.node, s.amounts) for s in slots])
        return Taken(short) if short is not None else Reserved(slots)

    def _wants(self) -> list[Want]:
        first = self.parts[0]
        offered = frozenset(self.offered)
        if first.feasible is not None:
            offered &= first.feasible
        wants = [Want(first.uid, first.amounts, first.constraints, offered, first.excluded)]
        wants += [
            Want(p.uid, p.amounts, p.constraints, p.feasible, p.excluded) for p in self.parts[1:]
        ]
        # Members to come share one Want's parts: the planner classes them by identity.
        wants += [
            Want(f"ghost-{i}", first.amounts, first.constraints, first.feasible)
            for i in range(self.ghosts)
        ]
        return wants

    def _views(self) -> list[NodeView]:
        """Every node, the ones offered first."""
        node = self.ledger.node
        views = [v for n in self.offered if (v := node(n)) is not None]
        if len(views) == self.ledger.node_count():
            return views
        seen = set(self.offered)
        return views + [v for n in self.ledger.node_names() if n not in seen and (v := node(n))]


def passes(placement: Placement) -> int:
    """About how many times a plan under `placement` visits each node, by what the planner
    costs in process against plain first-fit (hack/gang-plan-latency.py, 5,000 nodes, a gang
    of 1,024: 1.2-2.3 ms plain, 1.8-2.3 packed, 3.1-5.3 a level required, 4.8-6.3 preferred):
    once for first-fit, once more to group the nodes by the levels it packs along, three more
    for a required level (grouped, measured, and a plan that fails is made again on empty
    nodes), four more for a preferred one (grouped, measured, ranked and regrouped)."""
    return 1 + bool(placement.pack) + 3 * bool(placement.required) + 4 * bool(placement.preferred)


def job(
    g: GangState,
    m: Member,
    nodes: Sequence[str],
    ledger: Ledger,
    pack: tuple[Level, ...],
    now: float,
) -> Wait | PlanJob:
    """What planning gang `g` for member `m` (offered `nodes`) reads, copied; or why it is
    not planned now."""
    if now < g.retry_at:
        # No countdown in the reason: kube-scheduler writes the pod's condition again whenever
        # its message changes, so a reason that changes every attempt costs a status write
        # every attempt. GET /v1/gangs shows when the next try is.
        return Wait(
            f"gang {g.key}: backing off after its reservation expired ({g.timeouts} time(s))"
        )
    pending = [x for x in g.members.values() if not x.bound]
    unknown = [
        x.pod.name
        for x in pending
        if x.constraints is not None and x.constraints.unevaluable and x.feasible is None
    ]
    if unknown:
        return Wait(
            f"gang {g.key}: waiting for kube-scheduler to try member(s) "
            f"{', '.join(sorted(unknown)[:5])}, whose constraints only it can evaluate"
        )
    # m first: its place must be among `nodes`, the ones kube-scheduler offered it in this
    # cycle, as a place elsewhere could not be answered now (the hypothesis state machine of
    # tests/fuzz found a gang reserved with its asking member off the offered nodes).
    need = g.spec.min_members - g.bound_count()
    ordered = [m] + [x for x in pending if x is not m]
    parts = tuple(
        Part(x.pod.uid, x.pod.requests, x.constraints, x.feasible, x.excluded)
        for x in ordered[:need]
    )
    return PlanJob(
        key=g.key,
        epoch=g.epoch,
        holders=f"{g.key}#{g.generation}.{g.attempts + 1}",
        parts=parts,
        ghosts=max(0, need - len(parts)),
        offered=nodes,
        placement=Placement(g.spec.required, g.spec.preferred, pack=pack),
        ledger=ledger,
    )


def decide(
    g: GangState, job: PlanJob, result: Result, current: bool, now: float, wall: float
) -> tuple[Outcome, Change]:
    """What a plan's result comes to for gang `g`, on the loop: the outcome, and what should
    change in the gang's state. A gang no longer `current` (it ended), or reserved or
    released while it was planned, gives the places back and changes nothing."""
    if not current or g.phase is not Phase.WAITING or g.epoch != job.epoch:
        if isinstance(result, Reserved):
            job.ledger.release_all(s.holder for s in result.slots)
        return (Outcome.RESERVED if g.phase is Phase.RESERVED else Outcome.WAITING), None
    if isinstance(result, NoRoom):
        if result.never:
            return Outcome.NEVER, Wait(f"gang {g.key} can never fit: {result.never}", False)
        why = f"gang {g.key} does not fit now: {result.reason}; waiting for resources to free"
        return Outcome.WAITING, Wait(why, True)
    if isinstance(result, Taken):  # by a concurrent change: plan again later
        return Outcome.WAITING, Wait(f"gang {g.key} does not fit now: {result.short.detail}", True)
    pending = sum(not x.bound for x in g.members.values())
    waiting = g.spec.min_members - g.bound_count() - pending
    why = (
        f"gang {g.key}: places reserved; waiting for {waiting} more member(s) to be created"
        if waiting > 0
        else ""
    )
    members = tuple(p.uid for p in job.parts)
    return Outcome.RESERVED, Reservation(result.slots, members, now + g.spec.timeout, wall, why)
