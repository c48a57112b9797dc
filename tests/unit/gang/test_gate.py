"""The gang gate over a real gang manager and ledger: held members let through one by one as
their gang gets places, held gangs planned again only when room may have freed, strays let
through at once, bounded state, and the adaptive hold."""

from __future__ import annotations

import asyncio
from asyncio import run
from collections.abc import Callable
from typing import Any

import builders
import pytest
from builders import Clock, info
from test_gang_manager import BACKOFF, KEYS, NODES, cluster, member, passed, reserved

from extender.core.events import PodChange, PodEvent
from extender.core.ledger import Ledger
from extender.core.pod import PodInfo
from extender.gang.args import GangArgs
from extender.gang.gate import GangGate
from extender.gang.manager import GangManager
from extender.gang.state import Phase
from extender.gang.status import gang_status


class Gated:
    """A manager and its gate, fed the pod events in the service's order."""

    def __init__(self, lg: Ledger | None = None, clock: Clock | None = None, **gate: Any):
        clock = clock or Clock()
        self.gm = GangManager(lg or cluster(), KEYS, BACKOFF, clock=clock)
        self.gate = GangGate(self.gm, clock=clock, **gate)

    def gang(self, key: str) -> Any:
        return self.gm.gang(key)


def manager(lg: Ledger | None = None, clock: Clock | None = None, **gate: Any) -> Gated:
    return Gated(lg, clock, **gate)


def upsert(gm: Gated, pod: PodInfo) -> None:
    event = PodEvent(PodChange.UPSERT, pod.uid, pod)
    gm.gm.on_pod(event)
    gm.gate.on_pod(event)


def gone(gm: Gated, pod: PodInfo) -> None:
    event = PodEvent(PodChange.GONE, pod.uid, None)
    gm.gm.on_pod(event)
    gm.gate.on_pod(event)


# ---- the gang gate -----------------------------------------------------------------------

GATED: dict[str, Any] = {
    "schedulingGates": [{"name": "other.io/quota"}, {"name": "escher.io/gang"}]
}


def held(gang: str, i: int, **kw: Any) -> PodInfo:
    return member(gang, i, **kw, **GATED)


def lifted(gm: Gated, max_plans: int = 64) -> list[str]:
    pods, more = run(gm.gate.lift(max_plans))
    assert not more
    return sorted(p.name for p in pods)


def let_through(gm: Gated, pod: PodInfo) -> PodInfo:
    """What the informer reports once the gate is lifted."""
    free = PodInfo(**{**_fields(pod), "held": False})
    upsert(gm, free)
    return free


def test_held_members_go_through_one_by_one_as_each_gets_its_reserved_place() -> None:
    lg = cluster()
    gm = manager(lg)
    pods = [held("g", i) for i in range(3)]
    assert pods[0].held and not member("g", 0).held
    upsert(gm, pods[0])
    # Reserved from the informer alone: a place for every member, and the first let through.
    assert lifted(gm) == ["g-0"]
    g = gm.gang("default/g")
    assert g is not None and g.phase is Phase.RESERVED and reserved(lg) == 3
    assert lifted(gm) == []  # asked for already
    for p in pods[1:]:
        upsert(gm, p)
    assert lifted(gm) == ["g-1", "g-2"]
    # Each then passes straight to its own place, and the barrier and binds work as ever.
    places = set()
    for p in pods:
        free = let_through(gm, p)
        verdict = gm.gm.filter(free, NODES)
        assert verdict is not None and verdict.final
        places.update(passed(verdict))
    assert places == {s.node for s in g.slots.values()} and reserved(lg) == 3


@pytest.mark.parametrize(
    ("steps", "named"),
    [
        # (seconds passed, whether the patch ended then): named again lift_retry after it ended
        ([(0.0, True), (4.9, False), (0.2, False)], [True, False, True]),
        # a patch in flight longer than lift_retry (a thousand lifts at once): never twice
        ([(0.0, False), (5.1, False), (60.0, False)], [True, False, False]),
        ([(0.0, False), (30.0, True), (4.9, False), (0.2, False)], [True, False, False, True]),
    ],
    ids=["ended-at-once", "in-flight", "ended-late"],
)
def test_a_lift_is_asked_again_only_lift_retry_after_its_patch_ended(
    steps: list[tuple[float, bool]], named: list[bool]
) -> None:
    """Issue 61: counted from the asking, the lifts of a gang of 1,000 still in flight after
    lift_retry were sent again (1,871 lifts for 983 held members)."""
    clock = Clock()
    gm = manager(clock=clock, lift_retry=5.0)
    pod = held("g", 0, size=1)
    upsert(gm, pod)
    got = []
    for dt, ended in steps:
        clock.now += dt
        got.append(lifted(gm) == ["g-0"])
        if ended:
            gm.gate.lift_ended(pod.uid)
    assert got == named
    let_through(gm, pod)  # the informer shows it lifted
    clock.now += 60
    assert lifted(gm) == [] and len(gm.gate) == 0


def test_a_held_gang_that_does_not_fit_waits_without_planning_until_room_frees() -> None:
    lg = cluster()
    for i, n in enumerate(NODES[:3]):
        lg.observe_bound(f"other{i}", n, {"cpu": 4000})
    gm = manager(lg)
    for i in range(2):
        upsert(gm, held("g", i, size=2, cpu="3"))
    assert lifted(gm) == []
    g = gm.gang("default/g")
    assert g is not None and g.phase is Phase.WAITING and reserved(lg) == 0
    assert "does not fit now" in g.reason
    assert gang_status(g, 0).members[0].state == "held"
    attempts = g.attempts, g.reason
    assert lifted(gm) == [] and (g.attempts, g.reason) == attempts  # not planned again
    # A pod elsewhere finishes: room may have freed, and the gang fits now.
    lg.release("other0")
    gone(gm, PodInfo(**{**_fields(member("x", 0)), "uid": "other0"}))
    assert lifted(gm) == ["g-0", "g-1"] and g.phase is Phase.RESERVED


def test_room_a_node_adds_is_found_on_the_next_tick() -> None:
    lg = cluster()
    for i, n in enumerate(NODES):
        lg.observe_bound(f"other{i}", n, {"cpu": 4000})
    gm = manager(lg)
    upsert(gm, held("g", 0, size=1))
    assert lifted(gm) == []
    lg.upsert_node("n9", {"name": "n9"}, {"cpu": 4000, "memory": 8 << 30, "pods": 10}, {}, ())
    assert lifted(gm) == []  # no pod event said so
    gm.gate.room_may_have_freed()
    assert lifted(gm) == ["g-0"]


@pytest.mark.parametrize(
    ("pod", "why"),
    [
        ("no gang label", "a held pod of no gang"),
        ("no gang-min", "a held pod whose gang declaration is invalid"),
    ],
)
def test_held_pods_no_gang_can_lift_are_let_through_at_once(pod: str, why: str) -> None:
    raw = held("g", 0)
    marks = {} if pod == "no gang label" else {KEYS.gang: "g"}
    stray = PodInfo(**{**_fields(raw), "marks": marks, "gang": marks.get(KEYS.gang, "")})
    gm = manager()
    upsert(gm, stray)
    assert lifted(gm) == ["g-0"], why
    upsert(gm, PodInfo(**{**_fields(stray), "held": False}))
    assert lifted(gm) == [] and len(gm.gate) == 0


def _fields(p: PodInfo) -> dict[str, Any]:
    return {f: getattr(p, f) for f in PodInfo.__slots__}


def _node(lg: Ledger, name: str, cpu: int, labels: dict[str, str] | None = None) -> None:
    lg.upsert_node(name, labels or {"name": name}, {"cpu": cpu, "memory": 8 << 30, "pods": 10})


def _grow_two(gm: Gated, lg: Ledger) -> None:
    _node(lg, "n0", 10_000)
    _node(lg, "n1", 10_000)


# What changes after a gang of two 9-cpu members (4-cpu nodes) was found never to fit: whether
# it is planned again, and whom the gate then lets through.
NEVER_CHANGES: dict[str, tuple[Callable[[Gated, Ledger], object], int, list[str]]] = {
    "nothing (time passes, room may have freed)": (
        lambda gm, lg: gm.gate.room_may_have_freed(),
        0,
        [],
    ),
    "a pod freed room": (lambda gm, lg: setattr(gm.gm, "room_epoch", gm.gm.room_epoch + 1), 0, []),
    "a node relabelled, still too small": (lambda gm, lg: _node(lg, "n0", 4000, {"x": "y"}), 1, []),
    "one node grown, the gang needs two": (lambda gm, lg: _node(lg, "n0", 10_000), 1, []),
    "a node added that holds both": (lambda gm, lg: _node(lg, "big", 20_000), 1, ["g-0", "g-1"]),
    "two nodes grown": (_grow_two, 1, ["g-0", "g-1"]),
    "a node removed": (lambda gm, lg: lg.remove_node("n3"), 1, []),
}


@pytest.mark.parametrize(
    ("change", "plans", "let"), NEVER_CHANGES.values(), ids=NEVER_CHANGES.keys()
)
def test_a_gang_that_can_never_fit_is_held_with_its_reason_until_the_nodes_change(
    change: Callable[[Gated, Ledger], object], plans: int, let: list[str]
) -> None:
    lg = cluster()
    gm = manager(lg)
    planned = 0
    plan_held = gm.gm.plan_held

    def counted(g: Any) -> Any:
        nonlocal planned
        planned += 1
        return plan_held(g)

    gm.gm.plan_held = counted  # type: ignore[method-assign]
    members = [held("g", i, size=2, cpu="9") for i in range(2)]
    for m in members:
        upsert(gm, m)
    assert lifted(gm) == [] and planned == 1  # held, not let through to kube-scheduler
    g = gm.gang("default/g")
    assert g is not None and "can never fit" in g.reason and g.phase is Phase.WAITING
    told = gm.gate.notices()
    assert sorted((p.name, r) for p, r in told) == [("g-0", g.reason), ("g-1", g.reason)]
    assert lifted(gm) == [] and planned == 1 and gm.gate.notices() == []  # told once
    change(gm, lg)
    assert lifted(gm) == let
    assert planned == 1 + plans
    lifted(gm)
    assert planned == 1 + plans  # once per change
    # A member let through is told it no longer waits; one still held, the reason if it
    # changed (here: only 1 of 2 fit now).
    told = gm.gate.notices()
    assert all(r == ("" if p.name in let else g.reason) for p, r in told), told
    assert not let or sorted(p.name for p, _ in told) == let


def test_a_never_fitting_gangs_held_state_goes_with_its_pods() -> None:
    gm = manager()
    members = [held("g", i, size=2, cpu="9") for i in range(2)]
    for m in members:
        upsert(gm, m)
    assert lifted(gm) == [] and len(gm.gate) > 0
    for m in members:
        gone(gm, m)
    assert lifted(gm) == [] and len(gm.gate) == 0 and gm.gate.notices() == []


def test_members_only_kube_scheduler_can_judge_go_first_and_the_rest_follow_the_plan() -> None:
    gm = manager()
    affine = held("g", 1, size=2, affinity={"podAntiAffinity": {"x": 1}})
    plain = held("g", 0, size=2)
    upsert(gm, affine)
    upsert(gm, plain)
    assert lifted(gm) == ["g-1"]
    g = gm.gang("default/g")
    assert g is not None and "only it can evaluate" in g.reason
    # kube-scheduler tried it: its filter reserves the gang; the held one follows.
    free = let_through(gm, affine)
    assert passed(gm.gm.filter(free, ["n2"]), ["n2"]) == ["n2"]
    assert lifted(gm) == ["g-0"]


def test_a_member_beyond_the_minimum_waits_held_until_the_gang_is_bound() -> None:
    lg = cluster()
    gm = manager(lg)
    pods = [held("g", i, size=2) for i in range(3)]
    for p in pods:
        upsert(gm, p)
    assert lifted(gm) == ["g-0", "g-1"]
    g = gm.gang("default/g")
    assert g is not None
    places = {}
    for p in pods[:2]:
        free = let_through(gm, p)
        places[p.uid] = passed(gm.gm.filter(free, NODES))[0]
    for p in pods[:2]:
        gm.gm.bound(p.uid, places[p.uid])
    assert g.phase is Phase.BOUND
    assert lifted(gm) == ["g-2"]  # an ordinary pod now


def test_the_oldest_held_gang_is_planned_first_and_planning_per_turn_is_bounded() -> None:
    lg = cluster(cpu=2000)  # room for 4 members of 2 cpu in all
    gm = manager(lg)
    for gang in ("a", "b", "c"):
        for i in range(4):
            upsert(gm, held(gang, i, size=4, cpu="2"))
    pods, more = run(gm.gate.lift(max_plans=1))  # a fits; b and c are left for the next turns
    assert sorted(p.name for p in pods) == ["a-0", "a-1", "a-2", "a-3"] and more
    assert run(gm.gate.lift(max_plans=1)) == ([], True)  # b does not fit now
    assert run(gm.gate.lift(max_plans=1)) == ([], False)  # nor c
    a, b, c = (gm.gang(f"default/{x}") for x in "abc")
    assert a is not None and b is not None and c is not None
    assert a.phase is Phase.RESERVED and b.phase is c.phase is Phase.WAITING


def test_a_held_gang_leaves_no_gate_state_when_its_members_go() -> None:
    gm = manager()
    for k in range(100):
        pods = [held(f"c{k}", i, size=2, cpu="9") for i in range(2)]
        for p in pods:
            upsert(gm, p)
        run(gm.gate.lift())
        for p in pods:
            gone(gm, p)
    assert len(gm.gm) == 0 and len(gm.gate) == 0


def test_the_adaptive_hold_lasts_while_a_gang_waits_for_room_and_a_cooldown_after() -> None:
    lg, clock = cluster(), Clock()
    for i, n in enumerate(NODES):
        lg.observe_bound(f"other{i}", n, {"cpu": 4000})
    gm = manager(lg, clock, args=GangArgs(gate_cooldown_seconds=10.0))
    assert not gm.gate.hold()
    upsert(gm, held("g", 0, size=1))
    assert lifted(gm) == [] and gm.gate.hold()  # it waits for room
    lg.release("other0")
    gone(gm, PodInfo(**{**_fields(member("x", 0)), "uid": "other0"}))
    assert lifted(gm) == ["g-0"]
    clock.now += 9.9
    assert gm.gate.hold()  # cooling down
    clock.now += 0.2
    assert not gm.gate.hold()


@pytest.mark.parametrize(("after", "slow"), [(1.9, False), (2.0, True)], ids=["quick", "slow"])
def test_a_gang_gathering_slowly_keeps_its_members_held_until_its_minimum_exists(
    after: float, slow: bool
) -> None:
    """Issue 61: members of a gang of 10,000 let through as they were created waited at bind
    for members created minutes later. A gang still short of members `gather_hold_seconds`
    after its first holds them until the last exists (and sets the adaptive hold, so that
    the rest are created held); one that gathers quicker goes member by member as before."""
    clock = Clock()
    gm = manager(clock=clock, args=GangArgs(gather_hold_seconds=2.0, gather_lead_seconds=0))
    pods = [held("g", i) for i in range(3)]
    upsert(gm, pods[0])
    clock.now += after
    assert lifted(gm) == ([] if slow else ["g-0"])
    assert gm.gate.hold() is slow
    upsert(gm, pods[1])
    assert lifted(gm) == ([] if slow else ["g-1"])
    upsert(gm, pods[2])
    assert lifted(gm) == (["g-0", "g-1", "g-2"] if slow else ["g-2"])
    g = gm.gang("default/g")
    assert g is not None and g.phase is Phase.RESERVED and g.attempts == 1
    assert list(gm.gm.gathering()) == []
    for p in pods:
        gone(gm, p)
    assert len(gm.gate) == 0


@pytest.mark.parametrize(
    ("lead", "pace", "batch_at"),
    [
        # 10 members, one a second: at the 6th, the last 4 are 4 s away
        (4.0, 1.0, 5),
        (8.0, 1.0, 1),  # the 2nd gives the pace: 8 to come, 8 s away, so each goes at once
        (0.0, 1.0, 9),  # no lead: only once the minimum exists
        (30.0, 10.0, 6),  # one every 10 s: the last 3 are 30 s away at the 7th
    ],
    ids=["lead-4s", "lead-8s", "no-lead", "slow-pace"],
)
def test_a_gang_gathering_slowly_lets_its_members_through_once_its_last_are_near(
    lead: float, pace: float, batch_at: int
) -> None:
    """Issue 61: held until its minimum existed, a gang of 1,000 created at a client's pace
    had all its members' cycles after the last was created. Let through once the rest is
    expected within `gather_lead_seconds` (at the pace so far), their cycles overlap the
    last creations; none goes before, and the adaptive hold holds new members meanwhile."""
    clock = Clock()
    gm = manager(clock=clock, args=GangArgs(gather_hold_seconds=0.5, gather_lead_seconds=lead))
    size = 10
    for i in range(size):
        upsert(gm, held("g", i, size=size))
        got = lifted(gm)
        if i == 0:
            assert got == ["g-0"]  # within gather_hold: a quick gang's first goes as placed
        elif i < batch_at:
            assert got == [] and gm.gate.hold(), i
        elif i == batch_at:
            assert got == [f"g-{j}" for j in range(1, i + 1)], i
        else:
            assert got == [f"g-{i}"], i
        clock.now += pace


def test_with_nominations_a_held_member_goes_once_its_nomination_is_seen_or_waited_for() -> None:
    clock = Clock()
    gm = manager(clock=clock, nomination_wait=1.0)
    sent: dict[str, str] = {}
    delayed: list[str] = []

    def nominate(pod: PodInfo, node: str, wanted: Callable[[], bool] | None = None) -> None:
        sent[pod.name] = node
        if wanted is not None:
            delayed.append(pod.name)

    gm.gm.nominate = nominate
    pods = [held("g", i, size=2) for i in range(2)]
    for p in pods:
        upsert(gm, p)
    assert lifted(gm) == []  # placed and nominated, not yet seen nominated
    assert sorted(sent) == ["g-0", "g-1"] and delayed == []  # held: at once
    upsert(gm, PodInfo(**{**_fields(pods[0]), "nominated": sent["g-0"]}))  # the informer
    assert lifted(gm) == ["g-0"]
    clock.now += 1.0  # g-1's nomination never shows: it goes anyway
    assert lifted(gm) == ["g-1"]
    for p in pods:
        gone(gm, p)
    assert len(gm.gate) == 0


def test_run_takes_a_turn_for_held_and_gang_pods_and_none_for_other_pods_while_none_held() -> None:
    """A pod event wakes run() only when lift() may have something to do: the pods of no
    gang, most of a cluster's, cost no turn while nothing is held."""

    async def body() -> list[int]:
        gm = manager(args=GangArgs(lift_interval_seconds=3600.0))
        turns: list[int] = []
        lift = gm.gate.lift

        async def counted(max_plans: int = 64) -> tuple[list[PodInfo], bool]:
            turns.append(len(turns))
            return await lift(max_plans)

        gm.gate.lift = counted  # type: ignore[method-assign]
        task = asyncio.create_task(gm.gate.run(lambda *_: True, None, lambda: True))
        seen = []
        for event in (
            info(builders.pod("plain", uid="plain-uid", requests={"cpu": "1"})),  # no turn
            info(builders.pod("bound", uid="bound-uid", node="n0")),  # no turn
            member("g", 0),  # a gang's pod: a turn
            held("h", 0),  # held: a turn, and now something is held
            info(builders.pod("plain2", uid="plain2-uid")),  # a turn: h-0 is held
        ):
            upsert(gm, event)
            for _ in range(5):
                await asyncio.sleep(0)
            seen.append(len(turns))
        task.cancel()
        return seen

    assert run(body()) == [0, 0, 1, 2, 3]


@pytest.mark.parametrize("capacity", [0, 1, 3], ids=["none", "one", "three"])
def test_lifts_the_lifter_did_not_take_are_named_again_at_the_next_turn(capacity: int) -> None:
    """Issue 61: a gang of 10,000 let through at once filled the lifter's 1,024 in flight;
    the rest, named again only lift_retry later each, were deferred 54,764 times. The ones it
    did not take go at the gate's next turn (a pod event), each named once it is taken."""

    async def body() -> list[list[str]]:
        clock = Clock()  # never moves: nothing waits for lift_retry
        gm = manager(clock=clock, args=GangArgs(lift_interval_seconds=3600.0))
        taken: list[list[str]] = []
        room = [capacity]

        def lifter(pod: PodInfo, ended: Callable[[], None]) -> bool:
            if room[0] == 0:
                return False
            room[0] -= 1
            taken[-1].append(pod.name)
            return True

        task = asyncio.create_task(gm.gate.run(lifter, None, lambda: True))
        for turn in range(3):
            taken.append([])
            if turn == 0:
                for i in range(3):
                    upsert(gm, held("g", i, size=3))
            else:
                room[0] = 3  # the lifts in flight ended
                upsert(gm, info(builders.pod(f"plain{turn}", uid=f"plain{turn}-uid")))
            for _ in range(5):
                await asyncio.sleep(0)
        task.cancel()
        return taken

    names = ["g-0", "g-1", "g-2"]
    assert run(body()) == [names[:capacity], names[capacity:], []]
