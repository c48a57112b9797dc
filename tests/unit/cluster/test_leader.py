"""Leader election (extender.cluster.leader) against an in-memory Lease store that keeps
resourceVersion preconditions as the API server does, on a clock the test moves: who leads,
when a follower may take over, that a leader which cannot renew fences itself before anyone
else may win, that a graceful stop hands the lease over at once, and the start-up checks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from builders import Clock

from extender.cluster.leader import (
    DOMAIN_ANNOTATION,
    FOLLOWER_LOOKS,
    LeaderElectionError,
    LeaderElector,
)
from extender.kube.client import ApiError
from extender.settings import Settings

PATH = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/lease"
REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
DURATION, RENEW, RETRY = 15.0, 10.0, 2.0
LOOK = RETRY / FOLLOWER_LOOKS  # a follower's look at the lease


@dataclass
class Leases:
    """One Lease, written with the API server's optimistic concurrency."""

    lease: dict[str, Any] | None = None
    version: int = 0
    denied: set[str] = field(default_factory=set)  # verbs the access review refuses
    down: bool = False
    # Run once, between a replica's read and its write: another replica's whole attempt.
    before_write: Callable[[], Awaitable[None]] | None = None

    async def request(self, method: str, path: str, *, body: bytes | None = None) -> bytes:
        if self.down:
            raise ApiError(0, "connection refused")
        if path == REVIEWS:
            verb = json.loads(body or b"{}")["spec"]["resourceAttributes"]["verb"]
            return json.dumps({"status": {"allowed": verb not in self.denied}}).encode()
        if method == "GET":
            if self.lease is None:
                raise ApiError(404, "not found")
            return json.dumps(self.lease).encode()
        if self.before_write is not None:
            hook, self.before_write = self.before_write, None
            await hook()
        new = json.loads(body or b"{}")
        if method == "POST":
            if self.lease is not None:
                raise ApiError(409, "already exists")
        elif self.lease is None or new["metadata"].get("resourceVersion") != str(self.version):
            raise ApiError(409, "the object has been modified")
        self.version += 1
        new["metadata"]["resourceVersion"] = str(self.version)
        self.lease = new
        return json.dumps(new).encode()

    @property
    def holder(self) -> str:
        return str((self.lease or {}).get("spec", {}).get("holderIdentity", ""))


CHANGES: dict[str, list[bool]] = {}  # each elector's leadership changes, by identity


def elector(store: Leases, clock: Clock, name: str, domain: str = "escher.io") -> LeaderElector:
    changes = CHANGES[name] = []
    return LeaderElector(
        store,  # type: ignore[arg-type]  # the one method the elector calls
        "ns", "lease", name, domain, DURATION, RENEW, RETRY, changes.append, clock,
    )  # fmt: skip


def attempt(e: LeaderElector) -> bool:
    """One round of the elector's loop: try, then settle; the leadership after it."""
    started = e.clock()
    if asyncio.run(e._try()):
        e._renewed_at = started
    e._settle()
    return e.is_leader()


def test_the_first_replica_creates_the_lease_and_the_second_follows() -> None:
    store, clock = Leases(), Clock(100.0)
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    assert attempt(a) and not attempt(b)
    assert store.holder == "a" and b.holder == "a"
    assert store.lease is not None
    assert store.lease["metadata"]["annotations"] == {DOMAIN_ANNOTATION: "escher.io"}
    assert CHANGES["a"] == [True] and CHANGES["b"] == []


@pytest.mark.parametrize(
    ("paused_for", "a_leads", "b_leads"),
    [
        (RETRY, True, False),  # renewed late but within its deadline
        (RENEW - 0.1, True, False),
        (RENEW, False, False),  # fenced: stops writing, and nobody may take it yet
        (DURATION - 0.1, False, False),
        (DURATION, False, True),  # the lease expired by b's clock: b takes it
    ],
    ids=["retry", "before-deadline", "at-deadline", "before-expiry", "expired"],
)
def test_a_leader_that_cannot_renew_stops_before_another_may_win(
    paused_for: float, a_leads: bool, b_leads: bool
) -> None:
    store, clock = Leases(), Clock(100.0)
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    assert attempt(a) and not attempt(b)
    clock.now += paused_for  # a renews nothing meanwhile (paused, or the API server away)
    assert a.is_leader() is a_leads
    # It takes policy changes only while its renewals are answered (two retry periods).
    assert a.renewing() is (paused_for < 2 * RETRY)
    assert attempt(b) is b_leads
    assert not (a.is_leader() and b.is_leader())


@pytest.mark.parametrize(
    ("seen_ago", "wait"),
    [
        (0.0, LOOK),  # the lease was just renewed: look at FOLLOWER_LOOKS times its rate
        (DURATION - 0.1, 0.1),  # it expires before the next look: try then
        (DURATION - LOOK, LOOK),
        (DURATION + 1, LOOK),  # expired, and the attempt failed anyway: look as usual
    ],
)
def test_a_follower_tries_again_when_the_lease_it_saw_expires(seen_ago: float, wait: float) -> None:
    store, clock = Leases(), Clock(100.0)
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    assert attempt(a) and not attempt(b)  # b follows, having seen a's lease now
    assert (a.next_try(), b.next_try()) == (RETRY, LOOK)
    clock.now += seen_ago
    assert b.next_try() == pytest.approx(wait)


def test_a_resumed_leader_finds_the_lease_taken_and_does_not_take_it_back() -> None:
    store, clock = Leases(), Clock(100.0)
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    attempt(a)
    attempt(b)
    clock.now += DURATION
    assert attempt(b)
    assert not attempt(a)  # resumed: b renews, a sees a live holder
    assert store.holder == "b" and CHANGES["a"] == [True, False]


def test_two_replicas_racing_for_an_expired_lease_cannot_both_win() -> None:
    store, clock = Leases(), Clock(100.0)
    a, b, c = (elector(store, clock, n) for n in "abc")
    for e in (a, b, c):
        attempt(e)
    clock.now += DURATION

    async def c_first() -> None:
        assert await c._try()

    store.before_write = c_first  # c writes between b's read of the expired lease and b's write
    assert not attempt(b)
    assert store.holder == "c"


def test_a_graceful_stop_hands_the_lease_over_at_once() -> None:
    store, clock = Leases(), Clock(100.0)
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    attempt(a)
    attempt(b)
    assert asyncio.run(a.release())
    assert not a.is_leader() and store.holder == ""
    assert attempt(b)  # no lease duration to wait
    assert not asyncio.run(a.release())  # not the holder: nothing written
    assert store.holder == "b"


def test_a_release_without_the_api_server_fences_and_leaves_the_lease_to_expire() -> None:
    store, clock = Leases(), Clock(100.0)
    a = elector(store, clock, "a")
    attempt(a)
    store.down = True
    assert not asyncio.run(a.release())
    assert not a.is_leader() and store.holder == "a"


@pytest.mark.parametrize(
    ("denied", "lease_domain", "message"),
    [
        ({"update"}, None, "may not update leases"),
        ({"get", "create"}, None, "may not get leases"),
        (set(), "other.io", "belongs to replicas of resource domain 'other.io'"),
    ],
    ids=["no-update", "no-get", "other-domain"],
)
def test_a_misconfiguration_fails_at_start_naming_it(
    denied: set[str], lease_domain: str | None, message: str
) -> None:
    store = Leases(denied=denied)
    if lease_domain is not None:
        attempt(elector(store, Clock(100.0), "x", domain=lease_domain))
    with pytest.raises(LeaderElectionError, match=message):
        asyncio.run(elector(store, Clock(100.0), "a").check())


def test_the_start_checks_pass_with_the_grants_and_the_same_domain() -> None:
    store = Leases()
    asyncio.run(elector(store, Clock(100.0), "a").check())  # no lease yet
    attempt(elector(store, Clock(100.0), "x"))
    asyncio.run(elector(store, Clock(100.0), "a").check())


@pytest.mark.parametrize(
    ("times", "message"),
    [
        ({"lease_duration_seconds": 10, "renew_deadline_seconds": 10}, "renew_deadline_seconds"),
        ({"lease_duration_seconds": 10, "renew_deadline_seconds": 12}, "renew_deadline_seconds"),
        ({"renew_deadline_seconds": 5, "retry_period_seconds": 5}, "retry_period_seconds"),
    ],
    ids=["renew-equals-lease", "renew-above-lease", "retry-equals-renew"],
)
def test_lease_times_that_cannot_fence_are_refused_at_start(
    times: dict[str, float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Settings(leader_elect=True, **times)  # type: ignore[arg-type]
    Settings(leader_elect=True)  # kube-scheduler's defaults are consistent
