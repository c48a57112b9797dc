"""GangState's methods, the one way a gang's state changes (extender.gang.state): what each
event does to the fields, table by table, on a gang built here without a manager."""

from __future__ import annotations

import asyncio
from typing import Any

import builders
import pytest

from extender.core.pod import PodInfo
from extender.gang.barrier import Woken
from extender.gang.spec import GangSpec
from extender.gang.state import GangState, Phase, Reservation, Slot

SPEC = GangSpec("default", "g", min_members=3, timeout=30.0)
A, B, C = "g-0-uid", "g-1-uid", "g-2-uid"  # C: a member not created yet, unless a case adds it


def pod(i: int, **more: Any) -> PodInfo:
    return builders.info(builders.member("g", i, 3, **more))


def known(*pods: PodInfo) -> GangState:
    """A waiting gang that knows `pods` (from the informer)."""
    g = GangState(SPEC, generation=1)
    for p in pods:
        g.learn(p, None)
    return g


def reservation(*members: str, reason: str = "") -> Reservation:
    slots = tuple(Slot(f"h/{i}", f"n{i}", {"cpu": 1000}) for i in range(3))
    return Reservation(slots, members, expires=130.0, at=1e9, reason=reason)


def reserved() -> GangState:
    """Members A and B known and placed on n0 and n1; n2 kept for a member to come."""
    g = known(pod(0), pod(1))
    g.reserve(reservation(A, B, C))
    return g


@pytest.mark.parametrize(
    ("before", "learnt", "since", "expected"),
    [
        # (members known before, the pod learnt, unconfirmed_since) ->
        # (its unconfirmed_since, its node, newly bound, roster bumped)
        ((), pod(0), 5.0, (5.0, "", False, True)),  # a filter call first
        ((), pod(0), None, (None, "", False, True)),  # the informer first
        ((), pod(0, node="n0"), None, (None, "n0", True, True)),  # bound already
        ((pod(0),), pod(0), None, (None, "", False, False)),
        ((pod(0, node="n0"),), pod(0), 5.0, (None, "n0", False, False)),  # a stale filter
        ((pod(0),), pod(0, node="n1"), None, (None, "n1", True, False)),  # seen bound
    ],
)  # fmt: skip
def test_learn(
    before: tuple[PodInfo, ...],
    learnt: PodInfo,
    since: float | None,
    expected: tuple[float | None, str, bool, bool],
) -> None:
    g = known(*before)
    roster = g.roster
    m, landed = g.learn(learnt, since)
    assert g.members[learnt.uid] is m
    assert (m.unconfirmed_since, m.pod.node, landed, g.roster > roster) == expected


def test_a_member_first_learnt_from_a_filter_call_is_confirmed_by_the_informer_only() -> None:
    g = GangState(SPEC, generation=1)
    g.learn(pod(0), 5.0)
    assert g.learn(pod(0), 9.0)[0].unconfirmed_since == 5.0  # another filter call
    assert g.learn(pod(0), None)[0].unconfirmed_since is None


def test_reserve_places_the_members_still_pending_and_keeps_the_rest_for_members_to_come() -> None:
    g = known(pod(0), pod(1, node="n5"))  # B was bound while the plan ran
    g.passed = {A}
    g.wait("no room", short=True)
    g.reserve(reservation(A, B, reason="waiting for 1 more member(s) to be created"))
    assert [s.member for s in g.slots.values()] == [A, None, None]
    assert g.places == {A: "h/0"} and g.place_of(A) == Slot("h/0", "n0", {"cpu": 1000}, A)
    assert (g.phase, g.attempts, g.expires, g.reserved_at) == (Phase.RESERVED, 1, 130.0, 1e9)
    assert g.passed == set() and g.barrier is not None and not g.short
    assert g.reason == "waiting for 1 more member(s) to be created"


@pytest.mark.parametrize(
    ("event", "uid", "slot", "places", "committed", "landed"),
    [
        # event on member uid -> (the slot it returns, places left, committed, landed)
        ("bind", A, "h/0", {B}, {A}, [A]),
        ("bound", B, "h/1", {A}, set(), [B]),
        ("bind", C, None, {A, B}, {C}, [C]),  # no place: nothing to give back
    ],
)  # fmt: skip
def test_a_member_binding_or_bound_takes_its_place_out_of_the_reservation(
    event: str, uid: str, slot: str | None, places: set[str], committed: set[str], landed: list[str]
) -> None:
    g = reserved()
    g.nominate(uid, "n9")
    taken = getattr(g, event)(uid)
    assert (taken.holder if taken is not None else None) == slot
    assert slot not in g.slots and set(g.places) == places
    assert (g.committed, list(g.landed), g.nominated) == (committed, landed, {})


def test_a_member_seen_bound_after_its_binding_is_no_longer_binding() -> None:
    g = reserved()
    g.bind(A)
    assert g.bound(A) is None and g.committed == set() and list(g.landed) == [A]


def test_forget_gives_a_members_place_to_a_member_to_come() -> None:
    g = reserved()
    g.passed.add(A)
    g.committed.add(A)
    g.nominate(A, "n0")
    g.nomination_seen(A)
    roster = g.roster
    g.forget(A)
    assert A not in g.members and A not in g.places and g.slots["h/0"].member is None
    assert (g.passed, g.committed, g.nominated, g.seen_nominated) == (set(), set(), {}, set())
    assert g.roster == roster + 1


@pytest.mark.parametrize(
    ("why", "reason", "woken"),
    [
        ("its reservation expired", "its reservation expired", "its reservation expired"),
        ("", "r", "gang default/g was released"),  # the reason is kept
    ],
)
def test_release_gives_every_place_back_and_wakes_the_barrier(
    why: str, reason: str, woken: str
) -> None:
    g = reserved()
    g.wait("r")
    g.pass_filter(A, lambda: 1.0)
    g.nominate(A, "n0")
    g.nomination_seen(A)
    epoch = g.epoch

    async def released() -> tuple[dict[str, Slot], Woken]:
        assert g.barrier is not None
        g.barrier.arrive(A)
        waiting = asyncio.ensure_future(g.barrier.wait(A, timeout=5))
        await asyncio.sleep(0)
        return g.release(why), await waiting

    held, wake = asyncio.run(released())
    assert list(held) == ["h/0", "h/1", "h/2"] and wake.reason == woken
    assert (g.slots, g.places, g.passed, g.nominated, g.seen_nominated) == (
        {},
        {},
        set(),
        {},
        set(),
    )
    assert (g.phase, g.reason, g.epoch, g.barrier) == (Phase.WAITING, reason, epoch + 1, None)


def test_release_of_a_gang_holding_nothing_voids_a_plan_made_before_and_gives_nothing() -> None:
    g = known(pod(0))
    assert g.release("") == {} and g.epoch == 1 and g.phase is Phase.WAITING


def test_complete_after_release_is_bound_and_short_of_nothing() -> None:
    g = reserved()
    g.wait("no room", short=True)
    g.release("")
    g.complete()
    assert (g.phase, g.reason, g.short) == (Phase.BOUND, "", False)


@pytest.mark.parametrize(
    ("short_before", "reason", "short", "expected"),
    [(False, "why", True, True), (True, "why", None, True), (True, "why", False, False)],
)
def test_wait_says_why_and_whether_for_room(
    short_before: bool, reason: str, short: bool | None, expected: bool
) -> None:
    g = known(pod(0))
    g.wait("", short_before)
    g.wait(reason, short)
    assert (g.reason, g.short) == (reason, expected)


@pytest.mark.parametrize(
    ("created", "passing", "landed", "filtered_at"),
    [
        # C created?, members passing their filters, members bound -> filtered_at
        (False, [A, B], [], None),  # two of three
        (False, [A, B, A], [], None),  # one twice is still one
        (True, [A, B], [C], 7.0),  # and one bound: the minimum is placed
        (True, [A, B, C], [], 7.0),
        (False, [A, B, C], [], None),  # C is no member (forgotten): not counted
    ],
)  # fmt: skip
def test_pass_filter_notes_when_the_minimum_first_all_passed(
    created: bool, passing: list[str], landed: list[str], filtered_at: float | None
) -> None:
    g = reserved()
    if created:
        g.learn(pod(2), None)
    for uid in landed:
        g.bound(uid)
    calls: list[None] = []

    def wall() -> float:
        calls.append(None)
        return 7.0

    for uid in passing:
        g.pass_filter(uid, wall)
    assert g.filtered_at == filtered_at and len(calls) == (filtered_at is not None)


def test_move_puts_a_place_on_another_node_and_voids_its_nomination() -> None:
    g = reserved()
    g.nominate(A, "n0")
    g.nominate(B, "n1")
    g.move(g.slots["h/0"], "n7")
    assert g.place_of(A) == Slot("h/0", "n7", {"cpu": 1000}, A) and g.nominated == {B: "n1"}


@pytest.mark.parametrize(
    ("recorded", "withdrawn", "left"),
    [("n0", "n0", {}), ("n1", "n0", {A: "n1"})],  # a newer nomination stays
)
def test_withdraw_nomination_drops_only_the_one_not_written(
    recorded: str, withdrawn: str, left: dict[str, str]
) -> None:
    g = reserved()
    g.nominate(A, recorded)
    g.withdraw_nomination(A, withdrawn)
    assert g.nominated == left


def test_what_kube_scheduler_offers_and_refuses_a_member_and_back_off_forgets_the_refusals() -> (
    None
):
    g = known(pod(0))
    m = g.members[A]
    g.offered(m, ["n0", "n1"])
    g.exclude(m, "n1")
    g.exclude(m, "n2")
    assert (m.feasible, m.excluded) == (frozenset({"n0", "n1"}), frozenset({"n1", "n2"}))
    g.back_off(100.0, (2.0, 8.0))
    g.back_off(100.0, (2.0, 8.0))
    assert (m.excluded, g.timeouts, g.retry_at) == (frozenset(), 2, 104.0)


def test_redeclare_takes_the_new_declaration_and_makes_a_plan_worth_trying() -> None:
    g = known(pod(0))
    roster = g.roster
    g.redeclare(GangSpec("default", "g", min_members=2, timeout=30.0))
    assert g.spec.min_members == 2 and g.roster == roster + 1
