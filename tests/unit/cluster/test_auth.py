"""Who may call the policy API (extender.cluster.auth), against an API server that knows
some tokens and grants (fakeapi.Cluster): each outcome, the cache and its time to live, and
its bound."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from builders import Clock
from fakeapi import Cluster, connected

import extender.cluster.auth as auth
from extender.cluster.auth import Authorizer
from extender.core.access import Outcome

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


def cluster() -> Cluster:
    c = Cluster()
    c.users = {"alice-token": "alice", "bob-token": "bob"}
    c.grants = {("alice", "create", "ephemeralresources")}
    return c


@pytest.mark.parametrize(
    ("token", "static", "fault", "outcome", "reason"),
    [
        (None, None, 0, Outcome.UNAUTHENTICATED, "a bearer token is required"),
        ("alice-token", None, 0, Outcome.ALLOWED, ""),
        ("bob-token", None, 0, Outcome.FORBIDDEN, "bob may not create ephemeralresources"),
        ("nobody", None, 0, Outcome.UNAUTHENTICATED, "the token is not valid"),
        ("s3cret", "s3cret", 0, Outcome.ALLOWED, ""),  # the static token: no review
        ("alice-token", None, 503, Outcome.UNAVAILABLE, "cannot check the caller"),
    ],
)
def test_a_decision(
    tmp_path: Path,
    token: str | None,
    static: str | None,
    fault: int,
    outcome: Outcome,
    reason: str,
) -> None:
    c = cluster()
    if fault:
        c.fail("POST", TOKEN_REVIEWS, fault)

    async def decide() -> auth.AuthDecision:
        async with connected(c, tmp_path) as api:
            return await Authorizer(api, "escher.io", static, 10.0).decide(
                token, "create", "resources"
            )

    decision = asyncio.run(decide())
    assert decision.outcome is outcome
    assert reason in decision.reason
    if token == static:
        assert c.requests == []


def test_without_an_api_server_only_the_static_token_passes() -> None:
    async def decide(authorizer: Authorizer, token: str | None) -> Outcome:
        return (await authorizer.decide(token, "get", "resources")).outcome

    static = Authorizer(None, "escher.io", "s3cret", 10.0)
    assert asyncio.run(decide(static, "s3cret")) is Outcome.ALLOWED
    assert asyncio.run(decide(static, "other")) is Outcome.UNAUTHENTICATED
    assert asyncio.run(decide(Authorizer(None, "escher.io", None, 10.0), None)) is Outcome.ALLOWED


def test_answers_are_cached_for_their_time_to_live(tmp_path: Path) -> None:
    c, clock = cluster(), Clock()

    async def scenario() -> list[tuple[int, int]]:
        counts = []
        async with connected(c, tmp_path) as api:
            a = Authorizer(api, "escher.io", None, 10.0, clock)
            for step in (0, 5, 6):  # asked at 0, 5 and 11 s
                clock.advance(step)
                await a.decide("alice-token", "create", "resources")
                counts.append(
                    (len(c.sent("POST", TOKEN_REVIEWS)), len(c.sent("POST", ACCESS_REVIEWS)))
                )
            await a.decide("alice-token", "delete", "resources")  # another verb: asked
            counts.append((len(c.sent("POST", TOKEN_REVIEWS)), len(c.sent("POST", ACCESS_REVIEWS))))
        return counts

    assert asyncio.run(scenario()) == [(1, 1), (1, 1), (2, 2), (2, 3)]


def test_the_cache_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth, "_CACHE_MAX", 3)
    c = cluster()
    c.users = {f"t{i}": f"u{i}" for i in range(10)}

    async def scenario() -> tuple[int, int]:
        async with connected(c, tmp_path) as api:
            a = Authorizer(api, "escher.io", None, 600.0)
            for i in range(10):
                await a.decide(f"t{i}", "get", "resources")
            return len(a._users), len(a._grants)

    assert asyncio.run(scenario()) == (3, 3)
