"""The gang manager: every gang's members, its reservation and its barrier, from birth to end.

How all-or-nothing holds although kube-scheduler places one pod at a time and binds
asynchronously, with no reject-and-wake cycle:

1. Members are learnt from the pod informer (extender.core.events), as Coscheduling's
   PodGroupManager is: pending and bound members alike, with their requests and constraints.
   A gang exists while it has members; when the last is gone (deleted or finished) its state
   is destroyed, so a gang re-created under the same name is a new gang.
2. At the first member's filter, a place is planned for the whole gang at once
   (extender.gang.plan): for every known member, each with its own requests and constraints,
   and for members not created yet ("ghosts", shaped like the member being filtered), and
   reserved in the ledger in one atomic step (which checks cpu, memory and pods too). If the
   gang does not fit, nothing is held: two gangs that cannot both fit never deadlock. A
   large plan runs in a worker thread (extender.gang.planning), its verdict awaited.
3. Each member's filter passes only its reserved node; a member arriving later takes a ghost
   place that suits it, or the gang is planned again; a place kube-scheduler's own filters
   refuse moves to an offered node (extender.gang.places). Each member's node is written to its
   nominatedNodeName (extender.gang.nominations), so kube-scheduler tries it alone.
4. Bind is a barrier (extender.gang.barrier): a member waits until the gang's minimum is at
   bind or bound, then all bind at once. A bound member's place becomes the bound pod.
5. A reservation that makes no progress (no member created, passed to its place or at bind)
   for the gang's timeout is released, waking the members waiting at its barrier; the gang
   retries after an exponential backoff.
6. Held members (created behind the gang gate, Keys.gate) are not tried by kube-scheduler at
   all: the gate (extender.gang.gate) asks `plan_held` to plan and reserve their gang from
   the informer's knowledge alone and `claim` to give each its place, and lets each
   through only once it has one.
Bound members count as members and keep their nodes: after a restart (or a failover) the
rest of a partly bound gang is planned around them, so a gang is completed, never left.

Runs on the event loop only (informer events, filter and bind all arrive there), so it takes
no lock; the ledger it reserves in is thread-safe, and a plan run in a thread touches only
the ledger and copies (extender.gang.planning). Its state is extender.gang.state's, changed
only through GangState's methods: the planner and the nominations return what should change,
and the manager applies it. Fed by the cluster view, called through the Gangs protocol
(extender.gang) by the gang filter (extender.gang.plugin) and the bind verb
(extender.scheduling.verbs), by the service's expiry tick and by the gang gate; read by
GET /v1/gangs.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence

from extender.core.events import PodChange, PodEvent
from extender.core.ledger import Ledger
from extender.core.plugins import Verdict
from extender.core.pod import Keys, PodInfo
from extender.gang import nominations, places, planning
from extender.gang.args import DEFAULT_ARGS, GangArgs
from extender.gang.declarations import NO_GROUPS, Groups
from extender.gang.planning import PlanJob
from extender.gang.planning import Result as PlanResult
from extender.gang.spec import GangSpec, InvalidGang, gang_spec
from extender.gang.state import (
    Arrival,
    GangState,
    Member,
    Outcome,
    Phase,
    Refused,
    Ticket,
)

log = logging.getLogger(__name__)

HOSTNAME = "kubernetes.io/hostname"  # the well-known label: one domain per node


class GangManager:
    def __init__(
        self,
        ledger: Ledger,
        keys: Keys,
        args: GangArgs = DEFAULT_ARGS,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        max_gangs: int = 100_000,
        unconfirmed_ttl: float = 60.0,
        groups: Groups = NO_GROUPS,
    ) -> None:
        self.ledger = ledger
        self.keys = keys
        # Plans of more work than this (PlanJob.work) run in a worker thread.
        self.offload = args.offload
        # The topology levels gangs may name, and the group objects (PodGroups) members may
        # name: what gang_spec reads besides the pod (extender.gang.declarations).
        self.hierarchy = hierarchy = args.hierarchy
        # The levels plans pack by: all but the hostname, whose domains are single nodes.
        self._pack = tuple(lv for lv in hierarchy.levels if lv.key != HOSTNAME)
        self.groups = groups
        self.clock = clock
        self.wall = wall
        self.backoff = args.backoff
        # What a caller of the verbs alone can make the manager hold: members the informer
        # never confirms are forgotten after unconfirmed_ttl, and there are at most
        # max_gangs gangs.
        self.max_gangs = max_gangs
        self.unconfirmed_ttl = unconfirmed_ttl
        self._gangs: dict[str, GangState] = {}
        self._member_of: dict[str, str] = {}  # uid -> gang key
        self._generations = itertools.count(1)
        # Bumped whenever room may have freed (a pod gone or done, a reservation released):
        # a gang that did not fit is worth planning again only after it moved.
        self.room_epoch = 0
        self._short: set[str] = set()  # keys of the gangs whose last plan found no room now
        # Gangs with fewer members known than their minimum, not bound: key -> since when
        # (monotonic), oldest first (GangManager.gathering).
        self._gathering: dict[str, float] = {}
        # Writes a member's reserved node to its status.nominatedNodeName ("" clears it), so
        # kube-scheduler tries that node alone (extender.gang.nominations); None: off.
        self.nominate: nominations.Write | None = None

    # ---- reading ---------------------------------------------------------------------------

    def gangs(self) -> list[GangState]:
        return list(self._gangs.values())

    def gang(self, key: str) -> GangState | None:
        return self._gangs.get(key)

    def gang_of(self, uid: str) -> str | None:
        """The key of the gang pod `uid` is a known member of."""
        return self._member_of.get(uid)

    def __len__(self) -> int:
        return len(self._gangs)

    # ---- the informer's feed ---------------------------------------------------------------

    def on_pod(self, event: PodEvent) -> None:
        """Learn of a pod added, changed or gone (subscribed to the cluster view's events)."""
        pod = event.pod
        if event.change is PodChange.GONE or pod is None or pod.terminating or pod.done:
            self.room_epoch += 1  # its room is free (or about to be)
        if event.change is PodChange.GONE or pod is None or pod.terminating or not pod.gang:
            self._forget(event.uid)
            return
        try:
            spec = gang_spec(pod, self.keys, self.hierarchy, self.groups)
        except InvalidGang:
            self._forget(pod.uid)  # its filter says why; nothing to plan for it
            return
        if spec is not None and (spec.key in self._gangs or len(self._gangs) < self.max_gangs):
            new = pod.uid not in self._member_of
            g, m = self._learn(spec, pod, None)
            # A member created after its gang was reserved takes a place kept for it now, so
            # that its nomination reaches kube-scheduler before its first cycle.
            if (
                new
                and self.nominate is not None
                and g.phase is Phase.RESERVED
                and not (m.bound or pod.held)
                and places.slot_of(g, m, [s.node for s in g.slots.values()], self.ledger)
                is not None
            ):
                self._nominate(g, only=pod.uid, later=True)
            elif not m.bound:
                self._seen(g, pod)
        else:
            self._forget(pod.uid)

    def redeclared(self, pods: Iterable[PodInfo]) -> None:
        """A group object these pods name appeared, changed or went (extender.gang.
        declarations): learn them again under what it says now. A gang not yet bound whose
        declaration changed gives its places back and is planned again under the new one."""
        for pod in pods:
            try:
                spec = gang_spec(pod, self.keys, self.hierarchy, self.groups)
            except InvalidGang:
                spec = None
            g = self._gangs.get(spec.key) if spec is not None else None
            if spec is not None and g is not None and g.phase is not Phase.BOUND and g.spec != spec:
                self._release(g, f"gang {g.key}: its declaration changed")
                g.redeclare(spec)
            self.on_pod(PodEvent(PodChange.UPSERT, pod.uid, pod))

    def _learn(
        self, spec: GangSpec, pod: PodInfo, unconfirmed_since: float | None
    ) -> tuple[GangState, Member]:
        """Learn member `pod` (GangState.learn): from the informer when `unconfirmed_since`
        is None, else from a filter call then."""
        key = self._member_of.get(pod.uid)
        if key is not None and key != spec.key:
            self._forget(pod.uid)  # relabelled into another gang
        g = self._gangs.get(spec.key)
        if g is None:
            g = self._gangs[spec.key] = GangState(
                spec, next(self._generations), learnt_at=self.wall()
            )
        m, landed = g.learn(pod, unconfirmed_since)
        self._member_of[pod.uid] = spec.key
        self._index_gathering(g)
        if landed:
            self._on_bound(g, m)
        return g, m

    def _forget(self, uid: str) -> None:
        key = self._member_of.pop(uid, None)
        if key is None:
            return
        g = self._gangs[key]
        g.forget(uid)
        if not g.members:
            self._release(g, f"gang {key} ended: its members are gone")
            del self._gangs[key]
            self._short.discard(key)
            self._gathering.pop(key, None)
        else:
            self._index_gathering(g)

    def _on_bound(self, g: GangState, m: Member) -> None:
        """A member is seen bound: its place is the bound pod now, not a reservation."""
        slot = g.bound(m.pod.uid)
        if slot is not None:
            self.ledger.release(slot.holder)
        self._settle(g)

    def _settle(self, g: GangState) -> None:
        """Bound once the minimum is bound; else open the barrier if enough are at bind."""
        if g.bound_count() >= g.spec.min_members:
            if g.phase is Phase.BOUND:
                return
            self._release(g, "")
            g.complete()
            self._index_short(g)
            self._gathering.pop(g.key, None)
            log.info("gang bound", extra=g.timeline(bound_at=self.wall()))
        elif g.barrier is not None and g.ready():
            g.open_barrier(self.wall)

    # ---- filter ----------------------------------------------------------------------------

    def filter(self, pod: PodInfo, nodes: Sequence[str]) -> Verdict | Awaitable[Verdict] | None:
        """What a gang member may do now: pass only its reserved node, or wait (with why).
        None for a pod that is not a gang member, or whose gang is already bound (a new
        member of a bound gang that required a level: kept to its domain). When the
        gang must be planned and the plan is large, an awaitable: the plan runs off the loop
        (extender.gang.planning), and so does one already running for its gang."""
        try:
            spec = gang_spec(pod, self.keys, self.hierarchy, self.groups)
        except InvalidGang as e:
            return Verdict.rejecting(nodes, str(e), unresolvable=True)
        if spec is None:
            return None
        g = self._gangs.get(spec.key)
        if g is None and len(self._gangs) >= self.max_gangs:
            return Verdict.rejecting(
                nodes, f"gang {spec.key}: the extender tracks {self.max_gangs} gangs"
            )
        if g is not None and g.spec.min_members != spec.min_members:
            return Verdict.rejecting(
                nodes,
                f"gang {spec.key}: members disagree on {self.keys.gang_min}: pod {pod.name} "
                f"says {spec.min_members}, others {g.spec.min_members}",
                unresolvable=True,
            )
        g, m = self._learn(spec, pod, self.clock())
        if g.phase is Phase.BOUND:
            return None if m.bound else places.within_bound(g, nodes, self.ledger)
        if m.constraints is not None and m.constraints.unevaluable:
            g.offered(m, nodes)
        if g.planning is not None:
            return self._when_planned(g, m, nodes, g.planning)
        if g.phase is Phase.RESERVED:
            verdict = self._reserved(g, m, nodes)
            if verdict is not None:
                return verdict
        outcome = self._reserve(g, m, nodes, self.offload.filter)
        if isinstance(outcome, Outcome):
            return self._verdict(g, m, nodes, outcome)
        return self._when_planned(g, m, nodes, outcome)

    async def _when_planned(
        self, g: GangState, m: Member, nodes: Sequence[str], planning: asyncio.Task[Outcome]
    ) -> Verdict:
        # Shielded: a caller that gives up (its connection closed) must not cancel the plan,
        # whose places are taken in the worker thread and applied (or given back) here.
        return self._verdict(g, m, nodes, await asyncio.shield(planning))

    def _verdict(self, g: GangState, m: Member, nodes: Sequence[str], outcome: Outcome) -> Verdict:
        """The member's verdict once its gang was planned: its place, or why it waits."""
        if outcome is Outcome.RESERVED and g.phase is Phase.RESERVED:
            # m gets its place in its cycle; the others' cycles may come before the patches
            self._nominate(g, skip=m.pod.uid, later=True)
            verdict = self._reserved(g, m, nodes)
            if verdict is not None:
                return verdict
        return Verdict.rejecting(nodes, g.reason, unresolvable=outcome is Outcome.NEVER)

    def _reserved(self, g: GangState, m: Member, nodes: Sequence[str]) -> Verdict | None:
        """The verdict of a reserved gang, or None when it must be planned again."""
        slot = places.slot_of(g, m, nodes, self.ledger)
        # kube-scheduler tries a pod's nominated node first, alone, then every node: one that
        # is not the member's place (a nomination of an earlier reservation, not yet
        # rewritten) is turned away, and no reason to plan the gang again.
        if (
            len(nodes) == 1
            and m.pod.nominated == nodes[0]
            and (slot is None or slot.node != nodes[0])
        ):
            self._nominate(g, only=m.pod.uid)
            return Verdict.rejecting(
                nodes, f"gang {g.key}: this pod's place is not its nominated node"
            )
        if slot is None:
            if len(g.places) == len(g.slots):  # every place has its member
                why = f"gang {g.key} is reserved for its first {g.spec.min_members} members"
                return Verdict.rejecting(nodes, why)
            self._release(g, f"member {m.pod.name} fits none of the reserved places")
            return None
        if slot.node not in nodes:
            # kube-scheduler's own filters refused the reserved node: move the place to an
            # offered one, or plan the gang again without it.
            refused = slot.node
            g.exclude(m, refused)
            node = places.move(g, m, slot, nodes, self.ledger)
            if node is None:
                self._release(g, f"kube-scheduler refused node {refused} for member {m.pod.name}")
                return None
            g.move(slot, node)
            log.info(
                "gang member's place moved",
                extra={"gang": g.key, "member": m.pod.name, "refused": refused, "node": slot.node},
            )
        g.pass_filter(m.pod.uid, self.wall)
        return Verdict.passing_only(slot.node)

    def _reserve(
        self, g: GangState, m: Member, nodes: Sequence[str], inline_up_to: int
    ) -> Outcome | asyncio.Task[Outcome]:
        """Plan and reserve a place for every member still to be bound, m's among `nodes`
        (g.reason says why when it is not reserved): inline when the plan is no larger than
        `inline_up_to`, else in a worker thread, whose task is returned (and kept in
        g.planning until it is applied)."""
        job = planning.job(g, m, nodes, self.ledger, self._pack, self.clock())
        if isinstance(job, planning.Wait):
            self._change(g, job)
            return Outcome.WAITING
        if job.work <= inline_up_to:
            return self._apply(g, job, job.run())

        async def offloaded() -> Outcome:
            try:
                result = await asyncio.to_thread(job.run)
            finally:
                g.end_plan()
            return self._apply(g, job, result)

        task = asyncio.get_running_loop().create_task(offloaded())
        g.start_plan(task)
        return task

    def _apply(self, g: GangState, job: PlanJob, result: PlanResult) -> Outcome:
        current = self._gangs.get(job.key) is g
        outcome, change = planning.decide(g, job, result, current, self.clock(), self.wall())
        self._change(g, change)
        return outcome

    def _change(self, g: GangState, change: planning.Change) -> None:
        """Take what planning came to into gang `g`'s state."""
        if isinstance(change, planning.Wait):
            g.wait(change.reason, change.short)
        elif change is not None:
            g.reserve(change)
        self._index_short(g)

    # ---- for the gang gate (extender.gang.gate) -------------------------------------------

    def short_of_room(self) -> bool:
        """Whether some gang found no room at its last plan and waits for room now: what the
        adaptive gang gate holds new members for (extender.service)."""
        return bool(self._short)

    def _index_short(self, g: GangState) -> None:
        """Keep the index of the gangs short of room true to g.short."""
        if g.short:
            self._short.add(g.key)
        else:
            self._short.discard(g.key)

    def _index_gathering(self, g: GangState) -> None:
        """Keep the index of the gangs waiting for members to be created true to `g`."""
        if g.phase is not Phase.BOUND and len(g.members) < g.spec.min_members:
            self._gathering.setdefault(g.key, self.clock())
        else:
            self._gathering.pop(g.key, None)

    def gathering(self, key: str | None = None) -> Iterator[tuple[GangState, float]]:
        """The gangs waiting for members to be created, each with since when (monotonic),
        the one waiting longest first; only gang `key`, if given."""
        if key is not None:
            since = self._gathering.get(key)
            if since is not None:
                yield self._gangs[key], since
            return
        for k, since in self._gathering.items():
            yield self._gangs[k], since

    def plan_held(self, g: GangState) -> Outcome | asyncio.Task[Outcome]:
        """Plan and reserve gang `g`, whose members wait behind the gate, from the informer's
        knowledge alone (no filter call: every node is a candidate); a task when the plan
        runs off the loop (or one already does)."""
        if g.planning is not None:
            return g.planning
        pending = [m for m in g.members.values() if not m.bound]
        m = min(pending, key=lambda x: not x.pod.held)  # a held one, if any
        return self._reserve(g, m, self.ledger.node_names(), self.offload.background)

    def claim(self, g: GangState) -> bool:
        """Give each held member of reserved gang `g` its place. When one fits none of the
        places left, the reservation is released (plan again) and False returned. Members
        beyond the places wait."""
        nodes = [s.node for s in g.slots.values()]
        for m in g.members.values():
            if not m.pod.held or places.slot_of(g, m, nodes, self.ledger) is not None:
                continue
            if len(g.places) < len(g.slots):  # a place is left that it does not suit
                self._release(g, f"gang {g.key}: a held member fits none of the reserved places")
                return False
        self._nominate(g)
        return True

    # ---- bind ------------------------------------------------------------------------------

    def arrive(self, uid: str, node: str) -> Arrival:
        """A member reached bind on `node`: its ticket to wait on, or why it may not bind.
        None when the pod is no gang member, or its gang is already bound."""
        key = self._member_of.get(uid)
        if key is None:
            return None
        g = self._gangs[key]
        if g.phase is Phase.BOUND:
            return None
        slot = g.place_of(uid)
        if g.phase is not Phase.RESERVED or g.barrier is None or slot is None:
            return Refused(
                f"gang {key}: no place is reserved for this pod; {g.reason or 'retrying'}"
            )
        if slot.node != node:
            return Refused(f"gang {key}: this pod's place is reserved on {slot.node}, not {node}")
        g.barrier.arrive(uid)
        if g.ready():
            g.open_barrier(self.wall)
        return Ticket(g.barrier, key)

    def bound(self, uid: str, node: str) -> None:
        """The Binding of a member was created: its place becomes an assumed holding of the
        pod until the informer reports it bound."""
        key = self._member_of.get(uid)
        g = self._gangs.get(key) if key is not None else None
        if g is None:
            return
        m = g.members.get(uid)
        if m is None:
            return
        slot = g.bind(uid)
        if slot is not None:
            self.ledger.convert(slot.holder, uid, m.pod.requests)
        self._settle(g)

    # ---- time ---------------------------------------------------------------------------------

    def expire(self) -> int:
        """Forget members the informer never confirmed, and release every reservation that
        made no progress for its timeout (GangState.hold_on), waking the members waiting at
        its barrier with why (but not one whose barrier opened: its members are binding).
        Returns how many reservations were released."""
        now = self.clock()
        stale = [
            uid
            for g in self._gangs.values()
            for uid, m in g.members.items()
            if m.unconfirmed_since is not None and now - m.unconfirmed_since > self.unconfirmed_ttl
        ]
        for uid in stale:  # a pod no informer ever reported: a stray or forged filter call
            self._forget(uid)
        released = 0
        for g in self._gangs.values():
            if g.phase is not Phase.RESERVED:
                continue
            g.hold_on(now)
            if now < g.expires:
                continue
            if g.barrier is not None and g.barrier.is_open:
                continue
            g.back_off(now, self.backoff)
            why = f"its reservation expired after {g.spec.timeout:g}s without progress"
            self._release(g, f"gang {g.key}: {why}")
            released += 1
        return released

    def _release(self, g: GangState, why: str) -> None:
        """Give back every reserved place and wake the barrier's waiters with `why` (a plan
        running meanwhile is void: it would be applied to a gang that moved on)."""
        write = self.nominate
        if write is not None:
            for pod in nominations.cleared(g):
                write(pod, "")
        held = g.release(why)
        if held:
            self.ledger.release_all(held)
            self.room_epoch += 1

    # ---- nominations (extender.gang.nominations) ------------------------------------------

    def _nominate(self, g: GangState, skip: str = "", only: str = "", later: bool = False) -> None:
        """Write the nominations due (nominations.due) and record them in `g`; a delayed one
        is written only if still wanted then."""
        write = self.nominate
        if write is None:
            return
        for n in nominations.due(g, skip, only, later):
            g.nominate(n.pod.uid, n.node)
            write(n.pod, n.node, _wanted(g, n.pod.uid, n.node) if n.later else None)

    def _seen(self, g: GangState, pod: PodInfo) -> None:
        """The pod watch shows member `pod`: note its nomination arrived, or write it again if
        kube-scheduler cleared it while the place is still held (nominations.seen)."""
        seen = nominations.seen(g, pod)
        if seen is nominations.Seen.ARRIVED:
            g.nomination_seen(pod.uid)
        elif seen is nominations.Seen.CLEARED:
            g.forget_nomination(pod.uid)
            self._nominate(g, only=pod.uid)


def _wanted(g: GangState, uid: str, node: str) -> Callable[[], bool]:
    """What the writer asks before writing member `uid`'s delayed nomination of `node`: one
    not wanted any more is withdrawn."""

    def wanted() -> bool:
        if nominations.wanted(g, uid, node):
            return True
        g.withdraw_nomination(uid, node)
        return False

    return wanted
