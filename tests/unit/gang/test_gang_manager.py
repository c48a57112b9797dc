"""The gang manager over a real ledger: reservation at the first member's filter (with places
for members not created yet), each member's own constraints, the bind barrier, expiry and
backoff, membership changes, name reuse, restarts and churn."""

from __future__ import annotations

import asyncio
import gc
import itertools
from collections.abc import Sequence
from typing import Any

import builders
import pytest
from builders import Clock, info, walked

from extender.core.events import PodChange, PodEvent
from extender.core.ledger import HolderKind, Ledger
from extender.core.objects import Taint
from extender.core.plugins import Verdict
from extender.core.pod import Keys, PodInfo
from extender.gang.args import GangArgs
from extender.gang.barrier import WAKE_BATCH, Barrier, Wake, Woken
from extender.gang.manager import GangManager
from extender.gang.state import Phase, Refused, Ticket
from extender.gang.status import gang_status

KEYS = Keys.for_domain("escher.io")
BACKOFF = GangArgs(backoff_initial_seconds=2.0, backoff_max_seconds=8.0)
NODES = [f"n{i}" for i in range(4)]


def cluster(cpu: int = 4000, taints: dict[str, Taint] | None = None) -> Ledger:
    lg = Ledger("escher.io")
    for n in NODES:
        taint = (taints or {}).get(n)
        lg.upsert_node(
            n,
            {"name": n},
            {"cpu": cpu, "memory": 8 << 30, "pods": 10},
            {},
            (taint,) if taint else (),
        )
    return lg


def member(gang: str, i: int, *, size: int = 3, **more: Any) -> PodInfo:
    return info(builders.member(gang, i, size, **more))


def manager(lg: Ledger | None = None, clock: Clock | None = None) -> GangManager:
    return GangManager(lg or cluster(), KEYS, BACKOFF, clock=clock or Clock())


def upsert(gm: GangManager, pod: PodInfo) -> None:
    gm.on_pod(PodEvent(PodChange.UPSERT, pod.uid, pod))


def gone(gm: GangManager, pod: PodInfo) -> None:
    gm.on_pod(PodEvent(PodChange.GONE, pod.uid, None))


def passed(verdict: Verdict | None, nodes: Sequence[str] = NODES) -> list[str]:
    assert verdict is not None
    return verdict.passing(nodes)


def reserved(lg: Ledger) -> int:
    return lg.totals().holdings[HolderKind.RESERVATION]


def test_the_first_members_filter_reserves_the_whole_gang() -> None:
    lg = cluster()
    gm = manager(lg)
    first = member("g", 0)
    upsert(gm, first)
    verdict = gm.filter(first, NODES)
    assert verdict is not None and verdict.final
    (node,) = passed(verdict)
    g = gm.gang("default/g")
    assert g is not None and g.phase is Phase.RESERVED
    assert reserved(lg) == 3  # one place each for the two members not created yet
    assert "waiting for 2 more member(s) to be created" in g.reason
    # The others take the places kept for them, each passing straight to its own node.
    nodes = {node}
    for i in (1, 2):
        pod = member("g", i)
        upsert(gm, pod)
        (mine,) = passed(gm.filter(pod, NODES))
        nodes.add(mine)
    assert reserved(lg) == 3 and all(s.member for s in g.slots.values())


@pytest.mark.parametrize("known", [1, 2, 3])  # members created when the gang is planned
def test_a_reservation_adds_nothing_the_garbage_collector_walks(known: int) -> None:
    # A place per member, in the manager and in the ledger: a gang of 1,024 is 2,048 of them,
    # and every tracked one lengthened every full collection (issue 28).
    lg = cluster()
    gm = manager(lg)
    pods = [member("g", i) for i in range(known)]
    for p in pods:
        upsert(gm, p)
    assert passed(gm.filter(pods[0], NODES))
    g = gm.gang("default/g")
    assert g is not None and len(g.slots) == 3
    for slot in g.slots.values():
        held = lg.holding(slot.holder)
        assert held is not None and held.amounts == slot.amounts == pods[0].requests
        assert not gc.is_tracked(slot) and not gc.is_tracked(held)
    # Nor what it knows of its members: each PodInfo, with its constraints, and the member;
    # none refused anywhere, they share one empty set of exclusions.
    for m in g.members.values():
        assert m.constraints is not None
        assert not any(gc.is_tracked(x) for x in (m, m.pod, m.constraints))
    assert len({id(m.excluded) for m in g.members.values()}) == 1
    # The places of the members to come share their shape's mapping, here and in the ledger.
    ghosts = list(g.slots.values())[known:]
    assert len({id(s.amounts) for s in ghosts}) <= 1
    assert len({id(h.amounts) for s in ghosts if (h := lg.holding(s.holder))}) <= 1


@pytest.mark.parametrize("size", [3, 300])
def test_what_a_reserved_gang_adds_to_the_collectors_walk_does_not_grow_with_it(
    size: int,
) -> None:
    lg = Ledger("escher.io")
    for n in NODES:
        lg.upsert_node(n, {"name": n}, {"cpu": 400_000, "pods": 200})
    gm = manager(lg)
    warm = member("w", 0, size=size)  # the first gang leaves the indexes' entries
    assert passed(gm.filter(warm, NODES))
    gm._forget(warm.uid)
    before = walked()
    first = member("g", 0, size=size)
    assert passed(gm.filter(first, NODES))
    g = gm.gang("default/g")
    assert g is not None and len(g.slots) == size
    # The gang's own state (its member, its barrier): the same for 3 members as for 300.
    assert walked() - before < 120


def test_a_member_pinned_by_node_selector_is_planned_where_its_selector_allows() -> None:
    lg = cluster(cpu=1000)  # one member per node
    gm = manager(lg)
    pods = [member("g", 0), member("g", 1, nodeSelector={"name": "n3"}), member("g", 2)]
    for p in pods:
        upsert(gm, p)
    assert passed(gm.filter(pods[0], NODES)) != ["n3"]
    assert passed(gm.filter(pods[1], NODES)) == ["n3"]


def test_members_that_tolerate_different_taints_each_get_a_node_they_tolerate() -> None:
    taints = {
        "n0": Taint(key="a", effect="NoSchedule"),
        "n1": Taint(key="a", effect="NoSchedule"),
        "n2": Taint(key="b", effect="NoSchedule"),
        "n3": Taint(key="b", effect="NoSchedule"),
    }
    gm = manager(cluster(cpu=1000, taints=taints))
    tolerate = {
        "a": [{"key": "a", "operator": "Exists"}],
        "b": [{"key": "b", "operator": "Exists"}],
    }
    pods = [
        member("g", 0, size=2, tolerations=tolerate["a"]),
        member("g", 1, size=2, tolerations=tolerate["b"]),
    ]
    for p in pods:
        upsert(gm, p)
    assert passed(gm.filter(pods[0], NODES))[0] in ("n0", "n1")
    assert passed(gm.filter(pods[1], NODES))[0] in ("n2", "n3")


def test_members_with_different_requests_are_each_planned_their_own() -> None:
    lg = cluster(cpu=3000)
    gm = manager(lg)
    small, big = member("g", 0, size=2, cpu="1"), member("g", 1, size=2, cpu="3")
    upsert(gm, small)
    upsert(gm, big)
    gm.filter(small, NODES)
    (node,) = passed(gm.filter(big, NODES))
    view = lg.node(node)
    assert view is not None and view.used["cpu"] == 3000


def test_a_later_member_larger_than_its_kept_place_makes_the_gang_planned_again() -> None:
    lg = cluster(cpu=2000)
    gm = manager(lg)
    small = member("g", 0, size=2, cpu="1")
    upsert(gm, small)
    gm.filter(small, NODES)  # the place kept for the other member is shaped like this one
    big = member("g", 1, size=2, cpu="2")
    upsert(gm, big)
    (node,) = passed(gm.filter(big, NODES))
    g = gm.gang("default/g")
    assert g is not None and g.phase is Phase.RESERVED and g.attempts == 2
    amounts = {s.member: s.amounts["cpu"] for s in g.slots.values()}
    assert amounts == {small.uid: 1000, big.uid: 2000}
    assert lg.node(node).used["cpu"] >= 2000  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("cpu", "unresolvable", "why"),
    [("3", False, "does not fit now"), ("9", True, "can never fit")],
)
def test_a_gang_that_does_not_fit_holds_nothing(cpu: str, unresolvable: bool, why: str) -> None:
    lg = cluster()
    lg.observe_bound("other", "n0", {"cpu": 4000})
    lg.observe_bound("other2", "n1", {"cpu": 4000})
    lg.observe_bound("other3", "n2", {"cpu": 4000})
    gm = manager(lg)
    pod = member("g", 0, size=2, cpu=cpu)
    verdict = gm.filter(pod, NODES)
    assert verdict is not None and set(verdict.rejected) == set(NODES)
    assert all(r.unresolvable is unresolvable for r in verdict.rejected.values())
    assert why in next(iter(verdict.rejected.values())).reason
    assert reserved(lg) == 0


def test_a_node_kube_scheduler_refuses_is_excluded_and_the_place_moved() -> None:
    lg = cluster()
    gm = manager(lg)
    pod = member("g", 0, size=1)
    (first,) = passed(gm.filter(pod, NODES))
    # kube-scheduler's own filters turned that node down this time (it is not offered).
    offered = [n for n in NODES if n != first]
    (second,) = passed(gm.filter(pod, offered), offered)
    g = gm.gang("default/g")
    assert g is not None and g.attempts == 1  # moved, not planned again
    assert second != first and reserved(lg) == 1
    assert lg.node(first).used.get("cpu", 0) == 0  # type: ignore[union-attr]
    # Refused there too, and no other node offered: the gang is planned again.
    assert passed(gm.filter(pod, [first]), [first]) == [] and first in g.members[pod.uid].excluded


def test_constraints_only_kube_scheduler_evaluates_wait_for_its_verdict() -> None:
    gm = manager()
    affine = member("g", 1, size=2, affinity={"podAntiAffinity": {"x": 1}})
    plain = member("g", 0, size=2)
    upsert(gm, affine)
    upsert(gm, plain)
    verdict = gm.filter(plain, NODES)
    assert verdict is not None and set(verdict.rejected) == set(NODES)
    assert "whose constraints only it can evaluate" in next(iter(verdict.rejected.values())).reason
    # Once kube-scheduler has said where it may go, it is planned only there.
    assert passed(gm.filter(affine, ["n2"]), ["n2"]) == ["n2"]
    g = gm.gang("default/g")
    assert g is not None and {s.node for s in g.slots.values() if s.member == affine.uid} == {"n2"}


def test_members_disagreeing_on_the_gang_size_are_refused() -> None:
    gm = manager()
    gm.filter(member("g", 0, size=2), NODES)
    verdict = gm.filter(member("g", 1, size=3), NODES)
    assert verdict is not None and all(r.unresolvable for r in verdict.rejected.values())


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_the_barrier_opens_when_the_minimum_is_at_bind_and_binds_make_the_gang_bound() -> None:
    lg = cluster()
    gm = manager(lg)
    pods = [member("g", i, size=2) for i in range(2)]
    for p in pods:
        upsert(gm, p)
    places = {p.uid: passed(gm.filter(p, NODES))[0] for p in pods}

    async def scenario() -> list[str]:
        first = gm.arrive(pods[0].uid, places[pods[0].uid])
        assert isinstance(first, Ticket) and not first.barrier.is_open
        waiting = asyncio.create_task(first.barrier.wait(pods[0].uid, 5))
        await asyncio.sleep(0)
        second = gm.arrive(pods[1].uid, places[pods[1].uid])
        assert isinstance(second, Ticket) and second.barrier.is_open
        return [await waiting, await second.barrier.wait(pods[1].uid, 5)]

    assert run(scenario()) == [Woken(Wake.OPEN), Woken(Wake.OPEN)]
    for p in pods:
        gm.bound(p.uid, places[p.uid])
    g = gm.gang("default/g")
    assert g is not None and g.phase is Phase.BOUND and not g.slots
    assert reserved(lg) == 0 and lg.totals().holdings[HolderKind.ASSUMED] == 2
    # A bound gang's further members are ordinary pods.
    assert gm.filter(member("g", 5, size=2), NODES) is None
    assert gm.arrive(pods[0].uid, places[pods[0].uid]) is None


def test_bind_refuses_a_member_on_another_node_or_without_a_place() -> None:
    gm = manager()
    pods = [member("g", i, size=2) for i in range(2)]
    upsert(gm, pods[0])
    (node,) = passed(gm.filter(pods[0], NODES))
    other = next(n for n in NODES if n != node)
    refused = gm.arrive(pods[0].uid, other)
    assert isinstance(refused, Refused) and f"reserved on {node}, not {other}" in refused.reason
    upsert(gm, pods[1])
    # Not filtered yet: it holds no place of its own.
    refused = gm.arrive(pods[1].uid, node)
    assert isinstance(refused, Refused) and "no place is reserved" in refused.reason
    assert gm.arrive("not-a-member", node) is None


def test_a_bound_gang_logs_its_timeline_once_in_order(caplog: pytest.LogCaptureFixture) -> None:
    ticks = iter(float(t) for t in range(1, 100))
    gm = GangManager(cluster(), KEYS, clock=Clock(), wall=lambda: next(ticks))
    pods = [member("g", i, size=2) for i in range(2)]
    for p in pods:
        upsert(gm, p)  # learnt at 1
    # Reserved at 2 (the first member's filter), all filtered at 3 (the second's).
    places = {p.uid: passed(gm.filter(p, NODES))[0] for p in pods}
    for p in pods:
        assert isinstance(gm.arrive(p.uid, places[p.uid]), Ticket)  # ready at 4
    with caplog.at_level("INFO", logger="extender.gang.manager"):
        for p in pods:
            gm.bound(p.uid, places[p.uid])  # bound at 5
        upsert(gm, member("g", 0, size=2, node=places[pods[0].uid]))  # seen bound: no repeat
    (record,) = [r for r in caplog.records if r.message == "gang bound"]
    fields = record.__dict__
    marks = ("learnt_at", "reserved_at", "filtered_at", "ready_at", "bound_at")
    assert [fields[k] for k in marks] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert (fields["gang"], fields["members"]) == ("default/g", 2)


def test_a_member_alone_at_the_barrier_times_out_and_keeps_its_place() -> None:
    lg = cluster()
    gm = manager(lg)
    pod = member("g", 0, size=2)
    (node,) = passed(gm.filter(pod, NODES))
    ticket = gm.arrive(pod.uid, node)
    assert isinstance(ticket, Ticket)
    woken = run(ticket.barrier.wait(pod.uid, 0.05))
    assert woken.wake is Wake.TIMED_OUT and "not enough members reached bind" in woken.reason
    assert reserved(lg) == 2 and not ticket.barrier.waiting


def test_an_expired_reservation_is_released_and_the_gang_backs_off() -> None:
    lg, clock = cluster(), Clock()
    gm = manager(lg, clock)
    pod = member("g", 0, size=2, timeout=10)
    gm.filter(pod, NODES)
    clock.now += 5
    assert gm.expire() == 0
    clock.now += 6
    assert gm.expire() == 1
    g = gm.gang("default/g")
    assert g is not None and g.phase is Phase.WAITING and g.timeouts == 1
    assert reserved(lg) == 0 and "expired after 10s" in g.reason
    verdict = gm.filter(pod, NODES)  # during the backoff (2s)
    assert verdict is not None and "backing off" in next(iter(verdict.rejected.values())).reason
    assert gang_status(g, clock.now).retry_in_seconds == 2.0
    # The same words on every attempt of the backoff, so kube-scheduler has no new message
    # to write into the pod's condition each time.
    clock.now += 1
    again = gm.filter(pod, NODES)
    assert again is not None and again.rejected == verdict.rejected
    clock.now += 1.5
    assert len(passed(gm.filter(pod, NODES))) == 1 and reserved(lg) == 2


def test_a_reservation_that_keeps_coming_further_is_held_past_its_timeout() -> None:
    """The timeout bounds a stall, not the whole gathering: each expiry tick that sees a
    member more created, passed to its place or at bind holds the places a whole timeout
    from then (a gang of 10,000 takes minutes to be created); once nothing comes, they are
    released a timeout after the last tick that saw progress."""
    lg, clock = cluster(), Clock()
    gm = manager(lg, clock)
    pods = [member("g", i, size=3, timeout=10) for i in range(3)]
    upsert(gm, pods[0])
    passed(gm.filter(pods[0], NODES))
    start = clock.now
    steps: list[tuple[float, PodInfo | None, str, int]] = [
        # (seconds after the reservation, member, what it does then, released at that tick)
        (1, None, "", 0),  # the first tick takes the measure
        (8, pods[1], "created", 0),  # progress: held until 18
        (12, None, "", 0),  # past the 10 s the reservation was first given
        (17, pods[1], "filtered", 0),  # progress: held until 27
        (26, None, "", 0),
        (27.5, None, "", 1),  # nothing since 17: released
    ]
    for at, pod, does, released in steps:
        clock.now = start + at
        if pod is not None and does == "created":
            upsert(gm, pod)
        elif pod is not None:
            passed(gm.filter(pod, NODES))
        assert gm.expire() == released, at
    g = gm.gang("default/g")
    assert g is not None and g.phase is Phase.WAITING and reserved(lg) == 0


def test_a_member_back_at_bind_after_a_timeout_is_no_progress() -> None:
    """Members leaving the barrier (their bind timed out) and coming back count once: a gang
    whose members only retry is released."""
    lg, clock = cluster(), Clock()
    gm = manager(lg, clock)
    pod = member("g", 0, size=2, timeout=10)
    upsert(gm, pod)
    (node,) = passed(gm.filter(pod, NODES))
    ticket = gm.arrive(pod.uid, node)
    assert isinstance(ticket, Ticket)
    start = clock.now
    clock.now = start + 1
    assert gm.expire() == 0
    for at in (3, 6):  # its bind timed out (a tick sees it gone), then it is back
        ticket.barrier.leave(pod.uid)
        clock.now = start + at
        assert gm.expire() == 0
        ticket = gm.arrive(pod.uid, node)
        assert isinstance(ticket, Ticket)
        clock.now = start + at + 1
        assert gm.expire() == 0
    clock.now = start + 10.5
    assert gm.expire() == 1


def test_a_reservation_expires_under_members_waiting_at_bind_and_wakes_them() -> None:
    """A member waits at the barrier until its gang is whole or its reservation ends, which
    the expiry tells it: it is woken with why, and its gang backs off."""
    clock = Clock()
    lg = cluster()
    gm = manager(lg, clock=clock)
    pod = member("g", 0, size=2, timeout=1)
    (node,) = passed(gm.filter(pod, NODES))
    ticket = gm.arrive(pod.uid, node)
    assert isinstance(ticket, Ticket)
    clock.now += 5
    assert gm.expire() == 1
    woken = asyncio.run(ticket.barrier.wait(pod.uid, 10))
    assert woken.wake is Wake.CANCELLED and "expired after 1s" in woken.reason
    assert reserved(lg) == 0
    assert gm.arrive(pod.uid, node) == Refused(
        "gang default/g: no place is reserved for this pod; gang default/g: its reservation "
        "expired after 1s without progress"
    )


def test_a_reservation_whose_barrier_opened_is_not_expired_under_its_binds() -> None:
    """Once the barrier opened its members are creating their Bindings: their places stay
    held until each is bound, whatever the clock says."""
    clock = Clock()
    lg = cluster()
    gm = manager(lg, clock=clock)
    pods = [member("g", i, size=2, timeout=1) for i in range(2)]
    for p in pods:
        upsert(gm, p)
    nodes = [passed(gm.filter(p, NODES))[0] for p in pods]
    tickets = [gm.arrive(p.uid, n) for p, n in zip(pods, nodes, strict=True)]
    assert all(isinstance(t, Ticket) and t.barrier.is_open for t in tickets)
    clock.now += 5
    assert gm.expire() == 0
    assert reserved(lg) == 2


def test_a_deleted_waiting_member_stops_counting_and_a_replacement_takes_its_place() -> None:
    lg = cluster()
    gm = manager(lg)
    pods = [member("g", i, size=2) for i in range(2)]
    for p in pods:
        upsert(gm, p)
    gm.filter(pods[0], NODES)
    (node,) = passed(gm.filter(pods[1], NODES))
    ticket = gm.arrive(pods[1].uid, node)
    assert isinstance(ticket, Ticket)
    gone(gm, pods[1])
    g = gm.gang("default/g")
    assert g is not None and pods[1].uid not in g.members
    assert [s.member for s in g.slots.values()].count(
        None
    ) == 1  # its place waits for a replacement
    replacement = member("g", 7, size=2)
    upsert(gm, replacement)
    assert passed(gm.filter(replacement, NODES)) == [node]
    assert reserved(lg) == 2


def test_a_gang_ends_with_its_members_and_its_name_can_be_reused_all_or_nothing() -> None:
    lg = cluster()
    gm = manager(lg)
    old = [member("g1", i, size=3) for i in range(3)]
    for p in old:
        upsert(gm, p)
        (node,) = passed(gm.filter(p, NODES))
        upsert(gm, member("g1", int(p.name[-1]), size=3, node=node))  # seen bound
    first = gm.gang("default/g1")
    assert first is not None and first.phase is Phase.BOUND
    for p in old:
        gone(gm, p)
    assert gm.gang("default/g1") is None and len(gm) == 0 and reserved(lg) == 0
    # A new g1 of min 3 with only two members: reserved, but it never completes.
    new = [member("g1", i + 10, size=3) for i in range(2)]
    for p in new:
        upsert(gm, p)
        assert gm.filter(p, NODES) is not None  # a gang member again, not an ordinary pod
    g = gm.gang("default/g1")
    assert g is not None and g.generation != first.generation and g.phase is Phase.RESERVED
    ticket = gm.arrive(new[0].uid, passed(gm.filter(new[0], NODES))[0])
    assert isinstance(ticket, Ticket) and not ticket.barrier.is_open


def test_after_a_restart_bound_members_count_and_the_rest_is_planned_around_them() -> None:
    lg = cluster()
    gm = manager(lg)
    bound = [member("g", i, size=3, node=f"n{i}") for i in range(2)]
    pending = member("g", 2, size=3)
    for p in [*bound, pending]:
        lg.observe_bound(p.uid, p.node, p.requests) if p.node else None
        upsert(gm, p)
    g = gm.gang("default/g")
    assert g is not None and g.phase is Phase.WAITING and g.bound_count() == 2
    (node,) = passed(gm.filter(pending, NODES))
    assert len(g.slots) == 1 and reserved(lg) == 1
    ticket = gm.arrive(pending.uid, node)
    assert isinstance(ticket, Ticket) and ticket.barrier.is_open  # 2 bound + 1 at bind
    upsert(gm, member("g", 2, size=3, node=node))
    assert g.phase is Phase.BOUND and reserved(lg) == 0


def test_a_restart_with_every_member_bound_is_a_bound_gang() -> None:
    gm = manager()
    for i in range(2):
        upsert(gm, member("g", i, size=2, node=f"n{i}"))
    g = gm.gang("default/g")
    assert g is not None and g.phase is Phase.BOUND


def test_status_says_where_each_member_is_and_why_the_gang_waits() -> None:
    gm = manager()
    pods = [member("g", i, size=3) for i in range(2)]
    for p in pods:
        upsert(gm, p)
    gm.filter(pods[0], NODES)
    g = gm.gang("default/g")
    assert g is not None
    status = gang_status(g, gm.clock())
    assert status.phase == "reserved" and status.min_members == 3
    states = {m.pod: m.state for m in status.members}
    assert states == {"default/g-0": "reserved", "default/g-1": "reserved"}
    assert len(status.unclaimed_places) == 1
    assert "waiting for 1 more member(s) to be created" in status.reason


def test_ten_thousand_gangs_created_and_deleted_leave_no_state() -> None:
    lg = cluster(cpu=10**9)
    gm = manager(lg)
    for k in range(10_000):
        pods = [member(f"c{k}", i, size=2) for i in range(2)]
        for p in pods:
            upsert(gm, p)
            gm.filter(p, NODES)
        for p in pods:
            gone(gm, p)
    assert len(gm) == 0 and lg.totals().holdings == dict.fromkeys(HolderKind, 0)
    assert not gm._member_of  # no uid is remembered either


def test_a_member_called_twice_at_bind_counts_once_until_both_calls_end() -> None:
    """kube-scheduler gives up a bind call (its connection lost) and calls again while the
    first still waits: the member stays at bind until neither waits, and counts once."""

    async def scenario() -> tuple[int, int, int]:
        barrier = Barrier()
        barrier.arrive("m")
        first = asyncio.create_task(barrier.wait("m", 0.05))
        barrier.arrive("m")
        second = asyncio.create_task(barrier.wait("m", 10))
        await first  # times out
        while_second = len(barrier.waiting)
        barrier.open()
        await second
        return while_second, len(barrier.waiting), (await second).wake is Wake.OPEN

    assert asyncio.run(scenario()) == (1, 0, True)


def test_an_open_barrier_wakes_its_waiters_a_batch_to_a_turn_of_the_loop() -> None:
    """1,024 members woken in one turn of the loop each start their Binding there and hold
    it for all of them: a batch a turn, the rest in the next turns, every one woken."""
    size = 3 * WAKE_BATCH + 5

    async def scenario() -> list[int]:
        barrier = Barrier()
        woken: list[int] = []

        async def member(i: int) -> None:
            barrier.arrive(f"m{i}")
            assert (await barrier.wait(f"m{i}", 10)).wake is Wake.OPEN
            woken.append(i)

        tasks = [asyncio.create_task(member(i)) for i in range(size)]
        await asyncio.sleep(0)  # all waiting
        barrier.open()
        turns = []
        while len(woken) < size:
            await asyncio.sleep(0)
            turns.append(len(woken))
        await asyncio.gather(*tasks)
        return turns

    turns = run(scenario())
    assert turns[-1] == size and turns[0] <= WAKE_BATCH
    assert all(b - a <= WAKE_BATCH for a, b in itertools.pairwise([0, *turns]))


def test_a_cancelled_barrier_wakes_its_waiters_with_the_reason() -> None:
    async def scenario() -> Woken:
        barrier = Barrier()
        waiter = asyncio.create_task(barrier.wait("u", 5))
        await asyncio.sleep(0)
        barrier.cancel("gang g ended")
        return await waiter

    assert run(scenario()) == Woken(Wake.CANCELLED, "gang g ended")


def test_members_no_informer_ever_confirms_are_forgotten() -> None:
    lg, clock = cluster(), Clock()
    gm = GangManager(lg, KEYS, clock=clock, unconfirmed_ttl=60)
    forged = member("forged", 0, size=2)
    gm.filter(forged, NODES)  # a filter call for a pod that does not exist
    real = member("real", 0, size=2)
    upsert(gm, real)
    gm.filter(real, NODES)
    clock.now += 61
    gm.expire()
    assert gm.gang("default/forged") is None and gm.gang("default/real") is not None
    assert not [h for h in lg.snapshot().holdings if h.startswith("default/forged")]


def test_the_number_of_gangs_is_bounded() -> None:
    gm = GangManager(cluster(), KEYS, max_gangs=2)
    for g in ("a", "b"):
        upsert(gm, member(g, 0))
    upsert(gm, member("c", 0))
    assert gm.gang("default/c") is None
    verdict = gm.filter(member("c", 0), NODES)
    assert verdict is not None and "tracks 2 gangs" in next(iter(verdict.rejected.values())).reason
