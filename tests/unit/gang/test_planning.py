"""Plans made off the event loop (extender.gang.planning): a large plan runs in a worker
thread and is applied on the loop, with the same outcome as inline; members asking meanwhile
wait for it rather than plan again; a plan made void meanwhile gives its places back; a caller
that gives up does not lose the places the thread took."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from typing import Any

import pytest
from builders import Clock
from test_gang_manager import KEYS, NODES, cluster, gone, member, passed, reserved, upsert
from test_manager_topology import BLOCK as BLOCK_KEY
from test_manager_topology import RACK as RACK_KEY
from test_manager_topology import member as topology_member
from test_manager_topology import racks

from extender.core.plugins import Verdict
from extender.gang import planning
from extender.gang.args import GangArgs
from extender.gang.manager import GangManager
from extender.gang.planning import Offload
from extender.gang.state import Outcome, Phase
from extender.gang.topology import Level, Placement

RACK, BLOCK = Level("rack", RACK_KEY), Level("block", BLOCK_KEY)


def offloaded(offload: Offload) -> GangArgs:
    return GangArgs(plan_offload_above=offload.background, filter_plan_offload_above=offload.filter)


def offloading(lg: Any = None) -> GangManager:
    """A manager that plans every gang in a worker thread."""
    return GangManager(lg or cluster(), KEYS, offloaded(Offload(0, 0)), clock=Clock())


async def verdict_of(decided: Verdict | Awaitable[Verdict] | None) -> Verdict:
    assert decided is not None
    return decided if isinstance(decided, Verdict) else await decided


@pytest.mark.parametrize(
    ("size", "cpu", "fits"),
    [(3, "1", True), (4, "4", True), (5, "4", False), (9, "1", True)],
)  # fmt: skip
def test_a_plan_made_in_a_thread_reserves_what_one_made_inline_does(
    size: int, cpu: str, fits: bool
) -> None:
    async def places(gm: GangManager) -> tuple[list[str], list[str], int]:
        first = member("g", 0, size=size, cpu=cpu)
        upsert(gm, first)
        decided = gm.filter(first, NODES)
        threaded = not isinstance(decided, Verdict)
        verdict = await verdict_of(decided)
        g = gm.gang("default/g")
        assert g is not None and g.planning is None  # applied, nothing left running
        assert threaded == (gm.offload == Offload(0, 0))
        return passed(verdict), sorted(s.node for s in g.slots.values()), reserved(gm.ledger)

    inline = asyncio.run(places(GangManager(cluster(), KEYS, clock=Clock())))
    offloaded = asyncio.run(places(offloading()))
    assert offloaded == inline
    assert bool(offloaded[0]) is fits


def test_the_plan_runs_in_a_worker_thread_and_the_loop_is_free_meanwhile() -> None:
    ran_on: list[threading.Thread] = []
    run = planning.PlanJob.run

    def spying(job: planning.PlanJob) -> planning.Result:
        ran_on.append(threading.current_thread())
        return run(job)

    async def scenario() -> int:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        gm = offloading()
        first = member("g", 0)
        upsert(gm, first)
        beside = asyncio.create_task(ticker())
        await verdict_of(gm.filter(first, NODES))
        beside.cancel()
        return ticks

    mp = pytest.MonkeyPatch()
    mp.setattr(planning.PlanJob, "run", spying)
    try:
        ticks = asyncio.run(scenario())
    finally:
        mp.undo()
    assert ran_on and ran_on[0] is not threading.main_thread()
    assert ticks > 0  # the loop ran other work while the plan was made


def test_members_asking_while_their_gang_is_planned_wait_for_that_plan() -> None:
    async def scenario() -> tuple[list[list[str]], int]:
        gm = offloading()
        members = [member("g", i) for i in range(3)]
        for m in members:
            upsert(gm, m)
        # Three filters at once (a caller other than kube-scheduler, or the gate beside it):
        # one plan, and each member its own place.
        decided = [gm.filter(m, NODES) for m in members]
        verdicts = await asyncio.gather(*(verdict_of(d) for d in decided))
        g = gm.gang("default/g")
        assert g is not None
        return [passed(v) for v in verdicts], g.attempts

    places, attempts = asyncio.run(scenario())
    assert attempts == 1
    assert all(len(p) == 1 for p in places)


def test_a_gang_that_ends_while_it_is_planned_gives_its_places_back() -> None:
    async def scenario() -> tuple[Verdict, int, GangManager]:
        gm = offloading()
        first = member("g", 0)
        upsert(gm, first)
        decided = gm.filter(first, NODES)
        assert not isinstance(decided, Verdict)
        gone(gm, first)  # its only member deleted while the thread plans
        return await verdict_of(decided), reserved(gm.ledger), gm

    verdict, held, gm = asyncio.run(scenario())
    assert passed(verdict) == []
    assert held == 0 and len(gm) == 0


def test_a_release_while_the_gang_is_planned_voids_the_plan() -> None:
    async def scenario() -> tuple[Phase, int]:
        gm = offloading()
        first = member("g", 0)
        upsert(gm, first)
        decided = gm.filter(first, NODES)
        g = gm.gang("default/g")
        assert g is not None and g.planning is not None
        gm._release(g, "its declaration changed")  # as GangManager.redeclared does
        await verdict_of(decided)
        return g.phase, reserved(gm.ledger)

    phase, held = asyncio.run(scenario())
    assert phase is Phase.WAITING and held == 0


def test_a_caller_that_gives_up_leaves_the_plan_to_be_applied() -> None:
    """The verbs' caller may go (its connection closed): the places the thread took are
    still applied to the gang, never left held by nobody."""

    async def scenario() -> tuple[Phase, int]:
        gm = offloading()
        first = member("g", 0)
        upsert(gm, first)
        decided = gm.filter(first, NODES)
        assert not isinstance(decided, Verdict) and decided is not None
        waiter = asyncio.ensure_future(decided)
        await asyncio.sleep(0)
        waiter.cancel()
        g = gm.gang("default/g")
        assert g is not None and g.planning is not None
        await asyncio.wait([g.planning])
        return g.phase, reserved(gm.ledger)

    phase, held = asyncio.run(scenario())
    assert phase is Phase.RESERVED and held == 3


def test_the_gate_plans_off_the_loop_too() -> None:
    async def scenario() -> Outcome:
        gm = offloading()
        pods = [member("h", i, gates=[KEYS.gate]) for i in range(3)]
        for p in pods:
            upsert(gm, p)
        g = gm.gang("default/h")
        assert g is not None
        planned = gm.plan_held(g)
        assert not isinstance(planned, Outcome)
        assert gm.plan_held(g) is planned  # asked again meanwhile: the same plan
        return await planned

    assert asyncio.run(scenario()) is Outcome.RESERVED


@pytest.mark.parametrize(
    ("offload", "filter_threaded", "gate_threaded"),
    [
        (Offload(), False, False),  # the defaults: these plans are small
        (Offload(background=0, filter=10**6), False, True),  # the gate's off the loop
        (Offload(background=10**6, filter=0), True, False),
    ],
)
def test_where_a_plan_runs_depends_on_its_size_and_who_asks(
    offload: Offload, filter_threaded: bool, gate_threaded: bool
) -> None:
    async def scenario() -> tuple[bool, bool]:
        gm = GangManager(cluster(), KEYS, offloaded(offload), clock=Clock())
        first = member("g", 0)
        upsert(gm, first)
        decided = gm.filter(first, NODES)
        held = [member("h", i, gates=[KEYS.gate]) for i in range(3)]
        for p in held:
            upsert(gm, p)
        g = gm.gang("default/h")
        assert g is not None
        planned = gm.plan_held(g)
        threaded = (not isinstance(decided, Verdict), not isinstance(planned, Outcome))
        await verdict_of(decided)
        if not isinstance(planned, Outcome):
            await planned
        return threaded

    assert asyncio.run(scenario()) == (filter_threaded, gate_threaded)


@pytest.mark.parametrize(
    ("placement", "passes"),
    [
        (Placement(), 1),  # first-fit
        (Placement(pack=(RACK,)), 2),  # grouped by the levels packed along
        (Placement(required=RACK, pack=(RACK,)), 5),
        (Placement(preferred=RACK, pack=(RACK,)), 6),
        (Placement(required=BLOCK, preferred=RACK, pack=(BLOCK, RACK)), 9),
    ],
)
def test_a_topology_counts_as_more_passes_over_the_nodes(placement: Placement, passes: int) -> None:
    assert planning.passes(placement) == passes


@pytest.mark.parametrize(
    ("annotations", "threaded"),
    [({}, False), ({KEYS.gang_preferred_topology: "rack"}, True)],
)
def test_a_plan_under_a_topology_runs_off_the_loop_sooner(
    annotations: dict[str, str], threaded: bool
) -> None:
    """The same gang over the same 8 racked nodes: packed only, it is 8 x 2 + 4 = 20 node
    visits and members, under 30, and planned inline; preferring a rack, 8 x 6 + 4 = 52, and
    planned in a worker thread, as a topology plan at 5,000 nodes is."""

    async def scenario() -> bool:
        lg, _ = racks({"r0": 4, "r1": 4})
        gm = GangManager(lg, KEYS, offloaded(Offload(background=10**6, filter=30)), clock=Clock())
        pods = [topology_member("g", i, 4, **annotations) for i in range(4)]
        upsert(gm, pods[0])
        decided = gm.filter(pods[0], sorted(lg.node_names()))
        assert passed(await verdict_of(decided))
        return not isinstance(decided, Verdict)

    assert asyncio.run(scenario()) is threaded
