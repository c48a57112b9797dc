"""The gang manager under any interleaving of what reaches it (a Hypothesis state machine):
members created (some behind the gang gate), let through the gate (the patch sometimes
lost), filtered (by kube-scheduler, or forged: a filter for a pod no informer ever
reported), arriving at bind on the node they were passed or another, bound, confirmed bound
by the informer, deleted; other pods taking places meanwhile; time passing (expiry,
backoff, members never confirmed).

After every step:
- the ledger is consistent (tests/fuzz/invariants.py), and a reservation made in the step
  took no ephemeral or physical resource of a node over its capacity;
- the ledger's reservations are exactly the places the live gangs hold (none leaked);
- every gang the manager knows has members; a gang whose members are all gone has left no
  state, no holding and no barrier anyone still waits on;
- the adaptive gate's signal (short of room) is exactly "some waiting gang found no room";
- a member let through the gate has a reserved place of its own, or its gang is bound or can
  never fit, and a reservation made to let members through is within capacity.
Seeded (tests/fuzz/campaign.py): the same runs every time.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import builders
import pytest
from builders import KEYS, Clock, info
from hypothesis import seed
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from extender.core.events import PodChange, PodEvent
from extender.core.ledger import HolderKind, Ledger
from extender.core.pod import PodInfo
from extender.gang.args import GangArgs
from extender.gang.gate import GangGate
from extender.gang.manager import GangManager
from extender.gang.state import Phase, Refused, Ticket

from .campaign import MACHINE, SEED
from .invariants import check_consistent, check_within_capacity

E = "escher.io/e"
NODES = ["n0", "n1", "n2"]
GANGS = ["g0", "g1"]
MEMBERS = 4  # per gang: some may exceed its minimum
FOREIGN = ["f0", "f1", "f2"]

uids = st.sampled_from([f"{g}-{i}" for g in GANGS for i in range(MEMBERS)])
offered = st.lists(st.sampled_from(NODES), min_size=1, max_size=3, unique=True)


def pod(
    uid: str, size: int, cpu: int, e: int, node: str = "", timeout: float = 30, held: bool = False
) -> PodInfo:
    gang, i = uid.split("-")
    manifest = builders.member(
        gang,
        int(i),
        size,
        cpu=f"{cpu}m",
        requests={E: str(e)} if e else None,
        timeout=timeout,
        uid=uid,
        node=node,
        gates=[KEYS.gate] if held else [],
    )
    return info(manifest)


TAKEN: Counter[str] = Counter()  # steps of every run, by outcome, for the tally


BACKOFF = GangArgs(backoff_initial_seconds=2.0, backoff_max_seconds=8.0)


@seed(SEED)
class GangMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.lg = Ledger("escher.io")
        self.clock = Clock()
        self.gm = GangManager(self.lg, KEYS, BACKOFF, clock=self.clock)
        self.gate = GangGate(self.gm, clock=self.clock)
        self.sizes: dict[str, int] = {}
        self.shapes: dict[str, tuple[int, int]] = {}  # uid -> (cpu, e) of its pod
        self.held: set[str] = set()  # created behind the gang gate, not let through yet
        self.pods: dict[str, PodInfo] = {}  # what the informer reported, by uid
        self.waiting: dict[str, tuple[Ticket, str]] = {}  # at the bind barrier: ticket, node
        self.committed: dict[str, str] = {}  # Binding created, not yet seen bound
        self.steps: Counter[str] = Counter()

    @initialize(
        sizes=st.lists(st.integers(1, 3), min_size=len(GANGS), max_size=len(GANGS)),
        e_cap=st.integers(1, 3),
    )
    def cluster(self, sizes: list[int], e_cap: int) -> None:
        for n in NODES:
            self.lg.upsert_node(n, {"zone": n}, {"cpu": 4000, "memory": 8 << 30, "pods": 10})
        self.lg.set_capacity(E, {"n0": e_cap, "n1": e_cap})
        self.sizes = dict(zip(GANGS, sizes, strict=True))

    def event(self, event: PodEvent) -> None:
        """The service's order: the manager, then the gate."""
        self.gm.on_pod(event)
        self.gate.on_pod(event)

    def member(self, uid: str, node: str = "") -> PodInfo:
        cpu, e = self.shapes[uid]
        return pod(uid, self.sizes[uid.split("-")[0]], cpu, e, node, held=uid in self.held)

    def publish(self, info: PodInfo) -> None:
        """What the cluster view does with a pod it watches (extender.cluster.view)."""
        if info.node:
            self.lg.observe_bound(info.uid, info.node, info.requests, info.priority)
        self.pods[info.uid] = info
        self.event(PodEvent(PodChange.UPSERT, info.uid, info))

    # ---- the informer ----------------------------------------------------------------------

    @rule(
        uid=uids,
        cpu=st.sampled_from([500, 1000, 2000, 3000]),
        e=st.integers(0, 1),
        held=st.booleans(),
    )
    def create(self, uid: str, cpu: int, e: int, held: bool) -> None:
        if uid in self.pods:
            return
        self.shapes.setdefault(uid, (cpu, e))
        if held:
            self.held.add(uid)
        self.publish(self.member(uid))

    @rule(uid=uids)
    def delete(self, uid: str) -> None:
        gang = f"default/{uid.split('-')[0]}"
        g = self.gm.gang(gang)
        last = g is not None and set(g.members) <= {uid}
        self.lg.release(uid)
        self.held.discard(uid)
        self.pods.pop(uid, None)
        self.committed.pop(uid, None)
        self.event(PodEvent(PodChange.GONE, uid, None))
        if last:
            self.check_gone(gang)
            self.steps["gang ended"] += 1

    @rule(data=st.data())
    def confirm_bound(self, data: st.DataObject) -> None:
        """The informer reports a pod whose Binding was created as bound."""
        if not self.committed:
            return
        uid = data.draw(st.sampled_from(sorted(self.committed)))
        self.publish(self.member(uid, self.committed.pop(uid)))
        self.steps["bound"] += 1

    # ---- the gate lifter -------------------------------------------------------------------

    @rule(lost=st.booleans())
    def lift(self, lost: bool) -> None:
        """The lifter removes the gate of every member the manager names (or the patch is
        lost, and the informer keeps showing it held)."""
        before = {h.holder for h in self.reservations()}
        pods, _ = asyncio.run(self.gate.lift())
        new = [h for h in self.reservations() if h.holder not in before]
        if new:
            self.steps["reserved to lift"] += 1
            check_within_capacity(self.lg, [(h.node, h.amounts) for h in new], physical=True)
        for p in pods:
            assert p.uid in self.held, f"{p.uid} let through but never held"
            g = self.gm.gang(f"default/{p.gang}")
            assert g is not None
            mine = any(s.member == p.uid for s in g.slots.values())
            assert mine or g.phase is Phase.BOUND or "can never fit" in g.reason, (
                f"{p.uid} let through without a place: {g.phase} {g.reason}"
            )
            self.gate.lift_ended(p.uid)  # its patch ended, done or lost
            if not lost:
                self.held.discard(p.uid)
                self.publish(self.member(p.uid))
                self.steps["let through"] += 1

    # ---- kube-scheduler ------------------------------------------------------------------

    @rule(uid=uids, nodes=offered, cpu=st.sampled_from([500, 1000, 2000]), e=st.integers(0, 1))
    def filter(self, uid: str, nodes: list[str], cpu: int, e: int) -> None:
        """kube-scheduler filters a pending member (or anyone forges a filter call); it never
        tries a held one."""
        if (uid in self.pods and self.pods[uid].node) or uid in self.held:
            return
        self.shapes.setdefault(uid, (cpu, e))  # a forged pod's shape sticks like a real one's
        before = {h.holder for h in self.reservations()}
        verdict = self.gm.filter(self.member(uid), nodes)
        new = [h for h in self.reservations() if h.holder not in before]
        if new:
            self.steps["reserved"] += 1
            check_within_capacity(self.lg, [(h.node, h.amounts) for h in new], physical=True)
        if verdict is not None:
            passed = verdict.passing(nodes)
            assert set(passed) <= set(nodes), f"passed {passed}, not offered"
            assert len(passed) <= 1, f"a gang member was passed {passed}"

    @rule(uid=uids, node=st.sampled_from(NODES), where_passed=st.booleans())
    def arrive(self, uid: str, node: str, where_passed: bool) -> None:
        """kube-scheduler binds a member, mostly on the node its filter passed: it waits at
        the barrier (or is refused)."""
        if (uid in self.pods and self.pods[uid].node) or uid in self.waiting or uid in self.held:
            return  # a pod that was never created can be bound: its filter can be forged too
        g = self.gm.gang(f"default/{uid.split('-')[0]}")
        slot = g.place_of(uid) if g is not None else None
        if where_passed and slot is not None:
            node = slot.node
        ticket = self.gm.arrive(uid, node)
        if isinstance(ticket, Ticket):
            self.waiting[uid] = (ticket, node)
            self.steps["at barrier"] += 1
        elif isinstance(ticket, Refused):
            self.steps["bind refused"] += 1

    @rule(data=st.data(), timed_out=st.booleans())
    def wake(self, data: st.DataObject, timed_out: bool) -> None:
        """A waiter wakes: the barrier opened (bind), was cancelled, or it timed out."""
        if not self.waiting:
            return
        uid = data.draw(st.sampled_from(sorted(self.waiting)))
        ticket, node = self.waiting[uid]
        if not ticket.barrier.is_open and not timed_out:
            return
        del self.waiting[uid]
        ticket.barrier.leave(uid)  # what Barrier.wait does when it returns
        if ticket.barrier.is_open and uid in self.pods:  # (the API refuses a pod it lacks)
            self.gm.bound(uid, node)
            self.committed[uid] = node
            held = self.lg.holding(uid)
            assert held is not None and held.node == node, f"{uid} bound without a place held"

    # ---- others and time -----------------------------------------------------------------

    @rule(holder=st.sampled_from(FOREIGN), node=st.sampled_from(NODES), e=st.integers(0, 2))
    def foreign_assumed(self, holder: str, node: str, e: int) -> None:
        """Another pod's bind takes a place (the ledger checks its ephemeral resources)."""
        self.lg.hold(holder, node, {"cpu": 1000, E: e})

    @rule(holder=st.sampled_from(FOREIGN), node=st.sampled_from(NODES))
    def foreign_bound(self, holder: str, node: str) -> None:
        """Plain kube-scheduler bound another pod: a fact, even over capacity."""
        self.lg.observe_bound(holder, node, {"cpu": 2000, "pods": 1})

    @rule(holder=st.sampled_from(FOREIGN))
    def foreign_gone(self, holder: str) -> None:
        self.lg.release(holder)

    @rule(seconds=st.sampled_from([1.0, 10.0, 31.0, 61.0]))
    def tick(self, seconds: float) -> None:
        self.clock.now += seconds
        known = {k: set(g.members) for k in self.keys() if (g := self.gm.gang(k)) is not None}
        if self.gm.expire():
            self.steps["expired"] += 1
        for key in known:
            if self.gm.gang(key) is None:  # its unconfirmed members were forgotten
                self.check_gone(key)
                self.steps["gang ended"] += 1

    # ---- invariants ------------------------------------------------------------------------

    def keys(self) -> list[str]:
        return [f"default/{g}" for g in GANGS]

    def reservations(self) -> list[Any]:
        return [h for h in self.lg.snapshot().holdings.values() if h.kind is HolderKind.RESERVATION]

    def check_gone(self, key: str) -> None:
        assert self.gm.gang(key) is None, f"{key} outlived its members"
        left = [h.holder for h in self.reservations() if h.holder.startswith(f"{key}#")]
        assert not left, f"{key} ended but holds {left}"
        for uid, (ticket, _) in self.waiting.items():
            if uid.startswith(key.split("/")[1] + "-"):
                assert not ticket.barrier.is_open, f"{uid} may still bind into ended {key}"

    @invariant()
    def consistent(self) -> None:
        check_consistent(self.lg, [E])

    @invariant()
    def reservations_are_the_gangs_places(self) -> None:
        places = {s.holder for g in self.gm.gangs() for s in g.slots.values()}
        held = {h.holder for h in self.reservations()}
        assert held == places, f"reserved {sorted(held)} but the gangs hold {sorted(places)}"
        for g in self.gm.gangs():
            assert g.members, f"{g.key} has no members"
            if g.phase is not Phase.RESERVED:
                assert not g.slots, f"{g.key} is {g.phase} with places"
            assert not g.short or g.phase is Phase.WAITING, f"{g.key} short of room but {g.phase}"
            # The indexes agree with what they index.
            members = {s.member: h for h, s in g.slots.items() if s.member is not None}
            assert g.places == members, f"{g.key}: places {g.places}, slots' members {members}"
            landed = {u for u, m in g.members.items() if m.bound or u in g.committed}
            assert set(g.landed) == landed, f"{g.key}: landed {set(g.landed)}, not {landed}"
        short = any(g.short for g in self.gm.gangs())
        assert self.gm.short_of_room() is short, "the gate's signal disagrees with the gangs"

    def teardown(self) -> None:
        TAKEN.update(self.steps)


GangMachine.TestCase.settings = MACHINE
TestGangs = GangMachine.TestCase


@pytest.fixture(autouse=True)
def record(tally: Counter[str]) -> Any:
    yield
    tally.update({f"gang machine: {k}": v for k, v in TAKEN.items()})
    TAKEN.clear()
