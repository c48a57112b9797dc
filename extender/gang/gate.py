"""The gang gate: members created behind a scheduling gate, let through once their gang has room.

deploy/'s gang-gate admission policy creates gang members with the scheduling gate Keys.gate,
so kube-scheduler does not try them at all. The gate here plans their gang from the
informer's knowledge alone (GangManager.plan_held), gives each held member its place
(GangManager.claim) and names the members to let through, one by one as each has a place;
the lifter (extender.gang.kube.lifter) removes their gate. A gang that does not fit waits
without a scheduling cycle, so without the pod condition kube-scheduler writes on every cycle
that fails (extenders have no queueing hints: any cluster event retries them). Held pods no
gang will lift (no valid declaration: a typo must not strand a pod) go through at once.

A gang that can never fit (even on empty nodes: larger than every domain of its required
level, or than the cluster) stays held, untried by kube-scheduler, its reason told on each
member's pod (a condition, through `tell`) and in GET /v1/gangs; it is planned again only
when what the nodes could ever hold changes (Ledger.shape: a node added, removed, relabelled
or resized, an ephemeral capacity set) or its members do, in the gate's next turn (within
`interval`), off the loop when large as every background plan. Pods freed never make it fit.

A gang still short of members `gather_hold_seconds` after its first was learnt, and whose
last members are expected more than `gather_lead_seconds` away (at the pace they came so
far), gathers slowly (a gang of 10,000 takes minutes to create): its held members stay held
until its last are that near, then go together, so that none waits at bind longer than
gang_wait_seconds for members not created yet, and their cycles overlap the last creations.

Adaptive: while some gang waits for room or gathers slowly (and for a cooldown after),
`hold()` says new members should be held; the gate switch (extender.gang.kube.gateswitch)
tells deploy/'s policy.

State is bounded by the pods the informer shows held, and each entry leaves with its pod or
gang. Runs on the event loop only. Built and run by the service (extender.service), fed by the
cluster view's pod events after the gang manager.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import time
from collections.abc import Callable

from extender.core.events import PodChange, PodEvent
from extender.core.pod import PodInfo
from extender.gang.args import DEFAULT_ARGS, GangArgs
from extender.gang.manager import GangManager
from extender.gang.state import GangState, Member, Outcome, Phase

# Removes a held pod's gate (extender.gang.kube.lifter.Lifter): whether the patch was sent
# (not past the lifter's limit in flight), then its second argument called once the patch
# ended (done or failed). And sets the adaptive switch.
Lifter = Callable[[PodInfo, Callable[[], None]], bool]
Switch = Callable[[bool], None]
# Shows why a held member waits on its pod ("": it no longer does).
Teller = Callable[[PodInfo, str], None]


class GangGate:
    def __init__(
        self,
        gangs: GangManager,
        args: GangArgs = DEFAULT_ARGS,
        clock: Callable[[], float] = time.monotonic,
        lift_retry: float = 5.0,
        nomination_wait: float = 1.0,
    ) -> None:
        self.gangs = gangs
        self.clock = clock
        # A pod named for lifting is not named again while its patch is in flight, nor for
        # lift_retry seconds after it ended, unless the informer shows it held anew (the
        # patch may have failed, or its effect not reached the informer yet). Counted from
        # the patch's end: a thousand lifts at once take the API server longer than
        # lift_retry, and counted from the asking each was sent again (issue 61).
        self.lift_retry = lift_retry
        self.interval = args.lift_interval_seconds
        self.cooldown = args.gate_cooldown_seconds
        self.gather_hold = args.gather_hold_seconds
        self.gather_lead = args.gather_lead_seconds
        # With nominations, a member is let through once the informer shows its place in its
        # nominatedNodeName, so that kube-scheduler's first cycle tries that node alone; at
        # most nomination_wait seconds after it had its place (a nomination lost costs speed,
        # never the member).
        self.nomination_wait = nomination_wait
        self._placed_at: dict[str, float] = {}  # uid -> when it first had its place
        # Gangs with held members, in arrival order so the oldest is planned first; held
        # pods of no valid gang; members whose lift was asked for (uid -> when it may be
        # asked again: inf while its patch is in flight); per gang,
        # the (room epoch, roster) its last failed plan saw: not planned again before
        # either moves.
        self._held: dict[str, None] = {}
        self._held_by: dict[str, str] = {}  # uid of a held member -> its gang's key
        self._stray: dict[str, PodInfo] = {}
        self._lifting: dict[str, float] = {}
        self._tried: dict[str, tuple[int, int]] = {}
        # Per gang that can never fit, the (Ledger.shape, roster) its verdict saw: planned
        # again only when either moves. Per held member, the reason its pod was told; and the
        # notices not sent yet (uid -> pod, reason), drained each turn of run().
        self._never: dict[str, tuple[int, int]] = {}
        self._told: dict[str, str] = {}
        self._notices: dict[str, tuple[PodInfo, str]] = {}
        self._bumps = 0  # room the pods do not show (room_may_have_freed)
        self._short_at = float("-inf")  # when some gang last waited for room
        self._wanted = asyncio.Event()  # a pod event: look for members to let through

    def __len__(self) -> int:
        """Entries held (bounded by the held pods the informer shows)."""
        parts = (
            self._held,
            self._held_by,
            self._stray,
            self._lifting,
            self._tried,
            self._placed_at,
            self._never,
            self._told,
            self._notices,
        )
        return sum(len(p) for p in parts)

    def on_pod(self, event: PodEvent) -> None:
        """Subscribed to the cluster view's pod events, after the gang manager's."""
        uid, pod = event.uid, event.pod
        # A turn of run() only when there may be someone to let through: with nothing held,
        # a pod of no gang changes nothing lift() looks at (the switch is set every
        # `interval` all the same), and most pods are such.
        if self._held or self._stray or (pod is not None and (pod.held or pod.gang)):
            self._wanted.set()
        was = self._held_by.pop(uid, None)
        if was is not None and self.gangs.gang(was) is None:  # its gang ended with it
            self._held.pop(was, None)
            self._tried.pop(was, None)
            self._never.pop(was, None)
        if event.change is PodChange.GONE or pod is None or pod.terminating:
            self._stray.pop(uid, None)
            self._lifting.pop(uid, None)
            self._placed_at.pop(uid, None)
            self._told.pop(uid, None)
            self._notices.pop(uid, None)
            return
        key = self.gangs.gang_of(uid)
        if key is not None:
            self._stray.pop(uid, None)
            if pod.held and not pod.node:
                self._held.setdefault(key)
                self._held_by[uid] = key
            else:
                self._lifting.pop(uid, None)
                self._placed_at.pop(uid, None)
        elif pod.held:
            self._stray[uid] = pod
        else:
            self._stray.pop(uid, None)
            self._lifting.pop(uid, None)

    def room_may_have_freed(self) -> None:
        """Something the informer does not report as a pod freed room (a node added or
        grown): held gangs that did not fit are planned again."""
        self._bumps += 1

    async def lift(self, max_plans: int = 64) -> tuple[list[PodInfo], bool]:
        """The held pods to let through now, and whether planning stopped at `max_plans`
        (call again soon). A member goes once its gang is reserved and a place is its own,
        or once the gang is bound (an ordinary pod then); members whose constraints only
        kube-scheduler can evaluate go at once, so that it tries them. A large plan runs in
        a worker thread (GangManager.plan_held), and the loop serves verbs meanwhile."""
        now = self.clock()
        out: list[PodInfo] = []

        def let(pod: PodInfo) -> None:
            if self._told.pop(pod.uid, None):  # its pod said why it waited: no longer
                self._notices[pod.uid] = (pod, "")
            if now >= self._lifting.get(pod.uid, now):
                self._lifting[pod.uid] = math.inf  # until lift_ended
                out.append(pod)

        for pod in self._stray.values():
            let(pod)
        epoch = self.gangs.room_epoch + self._bumps
        plans = 0
        for key in list(self._held):
            g = self.gangs.gang(key)
            held = [] if g is None else [m for m in g.members.values() if m.pod.held]
            if g is None or not held:
                self._held.pop(key, None)
                self._tried.pop(key, None)
                self._never.pop(key, None)
                continue
            if g.phase is Phase.RESERVED:
                self.gangs.claim(g)
            if g.phase is Phase.WAITING:
                for m in held:
                    if m.constraints is not None and m.constraints.unevaluable:
                        let(m.pod)  # kube-scheduler must try it first
                shape = self.gangs.ledger.shape
                never = self._never.get(key)
                if never == (shape, g.roster):
                    continue  # nothing it could fit in changed
                if never is None and (
                    self._tried.get(key) == (epoch, g.roster) or now < g.retry_at
                ):
                    continue
                if plans >= max_plans:
                    return out, True
                plans += 1
                planned = self.gangs.plan_held(g)
                if isinstance(planned, Outcome):
                    outcome = planned
                    await asyncio.sleep(0)  # a plan made inline: let the verbs in before the next
                else:
                    outcome = await asyncio.shield(planned)
                if self.gangs.gang(key) is not g:  # it ended while it was planned
                    continue
                if outcome is Outcome.NEVER:  # held, untried, its reason on its pods
                    self._never[key] = (shape, g.roster)
                    self._tried.pop(key, None)
                    for m in held:
                        if self._told.get(m.pod.uid) != g.reason:
                            self._told[m.pod.uid] = g.reason
                            self._notices[m.pod.uid] = (m.pod, g.reason)
                    continue
                self._never.pop(key, None)
                for m in held:  # a pod told it could never fit is told what holds it now
                    if self._told.get(m.pod.uid, g.reason) != g.reason:
                        self._told[m.pod.uid] = g.reason
                        self._notices[m.pod.uid] = (m.pod, g.reason)
                if outcome is not Outcome.RESERVED:
                    self._tried[key] = (self.gangs.room_epoch + self._bumps, g.roster)
                    continue
                self._tried.pop(key, None)
                self.gangs.claim(g)
            if not self._gathering_slowly(key, now):  # else they go once its minimum exists
                for m in self._placed(g, held, now):
                    let(m.pod)
        return out, False

    def _placed(self, g: GangState, held: list[Member], now: float) -> list[Member]:
        """The held members of `g` that may go now: those with a place of their own (and
        their nomination seen or waited for), or all once `g` is bound."""
        if g.phase is Phase.BOUND:
            return held
        places = {s.member: s.node for s in g.slots.values() if s.member is not None}
        return [
            m
            for m in held
            if (node := places.get(m.pod.uid)) is not None and self._nominated(m.pod, node, now)
        ]

    def lift_ended(self, uid: str) -> None:
        """The patch lifting pod `uid`'s gate ended (done, failed or not sent): if the
        informer still shows it held `lift_retry` seconds from now, it is named again."""
        if uid in self._lifting:
            self._lifting[uid] = self.clock() + self.lift_retry

    def lifts_not_sent(self, pods: list[PodInfo]) -> None:
        """The lifter took none of `pods` (too many lifts in flight, or not the leader): they
        are named again at the next turn. Ten thousand members let through at once are sent
        as the lifts in flight end, not lift_retry later each."""
        for pod in pods:
            self._lifting.pop(pod.uid, None)

    def notices(self) -> list[tuple[PodInfo, str]]:
        """The held members whose pods must now say why they wait (or, "", no longer), taken."""
        out = list(self._notices.values())
        self._notices.clear()
        return out

    def _nominated(self, pod: PodInfo, node: str, now: float) -> bool:
        """Whether a held member with a place may go: its nomination is seen, or nominations
        are off, or it waited nomination_wait for it."""
        if self.gangs.nominate is None or pod.nominated == node:
            self._placed_at.pop(pod.uid, None)
            return True
        since = self._placed_at.setdefault(pod.uid, now)
        if now - since >= self.nomination_wait:
            del self._placed_at[pod.uid]
            return True
        return False

    def _gathering_slowly(self, key: str | None, now: float) -> bool:
        """Whether gang `key` (None: any) has waited `gather_hold` seconds or more for members
        to be created, and expects its last more than `gather_lead` seconds from now. Let
        through as they come, its members would wait at bind for the rest, time out there
        (gang_wait_seconds) and be retried, each retry a bind failure kube-scheduler answers
        with a status write and a move of its whole queue. Let through once the rest is
        expected within `gather_lead`, their cycles overlap the last creations."""
        for g, since in self.gangs.gathering(key):
            waited = now - since
            if waited < self.gather_hold:
                return False  # the later ones (key None) have waited less
            if _expected_in(g, waited) > self.gather_lead:
                return True
        return False

    def hold(self) -> bool:
        """Whether new members should be created held: while some gang waits for room or
        gathers its members slowly, and for `cooldown` seconds after (so that a gang
        finishing does not open the gate for the next one's members to be retried ungated
        at once)."""
        now = self.clock()
        if self.gangs.short_of_room() or self._gathering_slowly(None, now):
            self._short_at = now
        return now - self._short_at < self.cooldown

    async def run(
        self,
        lifter: Lifter,
        switch: Switch | None,
        may_lift: Callable[[], bool],
        tell: Teller | None = None,
    ) -> None:
        """Let held members through as their gangs get places: at each pod event, and every
        `interval` for room the pods do not show (nodes added or grown). Only while
        `may_lift()` (the leader, started): a follower's turn does nothing."""
        loop = asyncio.get_running_loop()
        bumped = loop.time()
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):
                    await self._wanted.wait()
            if loop.time() - bumped >= self.interval:  # also under a steady stream of events
                self.room_may_have_freed()
                bumped = loop.time()
            self._wanted.clear()
            if not may_lift():
                continue
            pods, more = await self.lift()
            for i, pod in enumerate(pods):
                if not lifter(pod, functools.partial(self.lift_ended, pod.uid)):
                    self.lifts_not_sent(pods[i:])
                    break
            for pod, reason in self.notices():
                if tell is not None:
                    tell(pod, reason)
            if switch is not None:
                switch(self.hold())
            if more:
                self._wanted.set()
                await asyncio.sleep(0)  # the rest in the next turn: let verbs in between


def _expected_in(g: GangState, waited: float) -> float:
    """Seconds until gang `g`'s last members are created, at the pace its members came in
    the `waited` seconds since its first (inf with one known: no pace yet)."""
    known = len(g.members)
    if known <= 1:
        return math.inf
    return max(0, g.spec.min_members - known) * waited / (known - 1)
