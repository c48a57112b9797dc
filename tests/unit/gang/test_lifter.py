"""The lifter against a scripted API server (tests/unit/service/fakeapi.py): the patch it
sends removes the gang gate by name and names the pod's UID; each outcome is counted; it
sends nothing while this replica may not write or too many lifts are in flight, and stop
cancels what is in flight."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from fakeapi import FakeAPI

from extender.core.pod import Keys, PodInfo
from extender.gang.kube.lifter import Lifter
from extender.kube.client import KubeAPI
from extender.metrics import Metrics

KEYS = Keys.for_domain("escher.io")


def held(name: str) -> PodInfo:
    return PodInfo(
        f"{name}-uid", "team", name, {}, {}, {KEYS.gang: "g"}, "g", 0, "", False, False, True, None
    )


def count(metrics: Metrics, outcome: str) -> float:
    return metrics.gang_lifts.labels(outcome)._value.get()


@pytest.mark.parametrize(
    ("status", "outcome"), [(200, "sent"), (404, "failed"), (422, "failed"), (500, "failed")]
)
def test_a_lift_removes_only_the_gang_gate_of_that_pod(
    tmp_path: Path, status: int, outcome: str
) -> None:
    seen: list[httpx.Request] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, json={"kind": "Status", "message": "scripted"})

    ended: list[str] = []

    async def scenario() -> Metrics:
        metrics = Metrics()
        async with FakeAPI(server, tmp_path) as fake:
            api = KubeAPI(fake.kubeconfig, qps=100, burst=10)
            lifter = Lifter(api, KEYS.gate, metrics, lambda: True)
            lifter(held("p0"), lambda: ended.append("p0"))
            while not seen or count(metrics, outcome) == 0:
                await asyncio.sleep(0.01)
            await lifter.aclose()
            await api.aclose()
        return metrics

    metrics = asyncio.run(scenario())
    assert ended == ["p0"]  # the gate may name it again once the patch ended, whatever came
    (request,) = seen
    assert request.method == "PATCH" and request.url.path == "/api/v1/namespaces/team/pods/p0"
    assert request.headers["content-type"] == "application/strategic-merge-patch+json"
    assert json.loads(request.content) == {
        "metadata": {"uid": "p0-uid"},
        "spec": {"schedulingGates": [{"name": "escher.io/gang", "$patch": "delete"}]},
    }
    assert count(metrics, outcome) == 1


def test_nothing_is_sent_by_a_follower_or_past_the_limit_and_stop_cancels(tmp_path: Path) -> None:
    release = asyncio.Event()
    seen: list[str] = []

    async def server(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        await release.wait()
        return httpx.Response(200, json={})

    ended: list[str] = []

    async def scenario() -> Metrics:
        metrics = Metrics()
        leading = False
        async with FakeAPI(server, tmp_path) as fake:
            api = KubeAPI(fake.kubeconfig, qps=100, burst=10)
            lifter = Lifter(api, KEYS.gate, metrics, lambda: leading, limit=2)
            sent = [lifter(held("p0"), lambda: ended.append("p0"))]  # a follower lifts nothing
            leading = True
            for i in range(1, 4):  # the third is past the limit
                sent.append(lifter(held(f"p{i}"), lambda i=i: ended.append(f"p{i}")))  # type: ignore[misc]
            assert sent == [False, True, True, False]  # the gate names the unsent again
            while len(seen) < 2:
                await asyncio.sleep(0.01)
            assert ended == []  # in flight
            await lifter.aclose()  # both still in flight: cancelled, not counted
            await api.aclose()
        return metrics

    metrics = asyncio.run(scenario())
    assert sorted(ended) == ["p1", "p2"]  # cancelled: ended; the unsent never began
    assert sorted(seen) == ["/api/v1/namespaces/team/pods/p1", "/api/v1/namespaces/team/pods/p2"]
    assert count(metrics, "deferred") == 2
    assert count(metrics, "sent") == count(metrics, "failed") == 0


@pytest.mark.parametrize(
    ("reason", "status", "why"),
    [
        ("gang team/g can never fit: no rack has room", "True", "GangCannotFit"),
        ("", "False", "GangLetThrough"),
    ],
)
def test_tell_sets_the_held_condition_on_the_pods_status(
    tmp_path: Path, reason: str, status: str, why: str
) -> None:
    seen: list[httpx.Request] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"kind": "Pod"})

    async def scenario() -> Metrics:
        metrics = Metrics()
        async with FakeAPI(server, tmp_path) as fake:
            api = KubeAPI(fake.kubeconfig, qps=100, burst=10)
            lifter = Lifter(api, KEYS.gate, metrics, lambda: True)
            lifter.tell(held("p0"), reason)
            while not seen or count(metrics, "told") == 0:
                await asyncio.sleep(0.01)
            await lifter.aclose()
            await api.aclose()
        return metrics

    asyncio.run(scenario())
    (request,) = seen
    assert request.url.path == "/api/v1/namespaces/team/pods/p0/status"
    body = json.loads(request.content)
    assert body["metadata"]["uid"] == "p0-uid"
    (cond,) = body["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("escher.io/GangHeld", status, why)
    assert cond["message"] == (reason or "its gang has places")
