"""The binder (extender.scheduling.kube.binder) against an API server holding pods
(fakeapi.Cluster): each outcome of a Binding, and no request at all from a replica that does
not lead."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

import builders
import pytest
from fakeapi import Cluster, connected

from extender.kube.client import KubeAPI
from extender.metrics import Metrics
from extender.scheduling.kube.binder import Binder
from extender.scheduling.verbs import BindError


@pytest.mark.parametrize(
    ("uid", "fault", "leading", "error"),
    [
        ("u1", 0, True, None),
        ("u2", 0, True, "the pod is gone"),  # another pod took the name: its UID differs
        ("u1", 409, True, "conflict"),
        ("u1", 500, True, "HTTP 500"),
        ("u1", 0, False, "this replica is not the leader"),
    ],
)
def test_a_bind(tmp_path: Path, uid: str, fault: int, leading: bool, error: str | None) -> None:
    cluster = Cluster()
    cluster.put("pods", "default/p", builders.pod("p", uid="u1"))
    if fault:
        cluster.fail("POST", "/api/v1/namespaces/default/pods/p/binding", fault)
    metrics = Metrics()

    async def bind() -> str | None:
        async with connected(cluster, tmp_path) as api:
            try:
                await Binder(api, metrics, lambda: leading).bind("default", "p", uid, "n1")
            except BindError as e:
                return str(e)
        return None

    outcome = asyncio.run(bind())
    if error is None:
        assert outcome is None
        assert cluster.kinds["pods"].objects["default/p"]["spec"]["nodeName"] == "n1"
    else:
        assert outcome is not None and error in outcome
        assert outcome.startswith("binding pod default/p to n1")
        assert "nodeName" not in cluster.kinds["pods"].objects["default/p"]["spec"]
    posts = cluster.sent("POST", "/api/v1/namespaces/default/pods/p/binding")
    assert len(posts) == (1 if leading else 0)
    observed = metrics.bind_seconds._sum.get()  # each request's time is observed
    assert (observed > 0) is leading


def test_a_pod_bound_already_is_a_conflict(tmp_path: Path) -> None:
    cluster = Cluster()
    cluster.put("pods", "default/p", builders.pod("p", uid="u1", node="n0"))

    async def bind() -> None:
        async with connected(cluster, tmp_path) as api:
            await Binder(api, Metrics(), lambda: True).bind("default", "p", "u1", "n1")

    with pytest.raises(BindError, match="conflict"):
        asyncio.run(bind())
    assert cluster.kinds["pods"].objects["default/p"]["spec"]["nodeName"] == "n0"


class _SlowAPI:
    """Answers each request after a few loop turns, counting how many are in flight."""

    def __init__(self) -> None:
        self.now = self.most = self.done = 0

    async def request(self, method: str, path: str, **_: object) -> bytes:
        self.now += 1
        self.most = max(self.most, self.now)
        for _turn in range(3):
            await asyncio.sleep(0)
        self.now -= 1
        self.done += 1
        return b"{}"


@pytest.mark.parametrize(("in_flight", "binds"), [(1, 5), (3, 10), (64, 10)])
def test_bindings_in_flight_are_capped(in_flight: int, binds: int) -> None:
    api = _SlowAPI()
    binder = Binder(cast(KubeAPI, api), Metrics(), lambda: True, in_flight)

    async def burst() -> None:
        await asyncio.gather(*(binder.bind("default", f"p{i}", "u", "n1") for i in range(binds)))

    asyncio.run(burst())
    assert api.done == binds and api.most == min(in_flight, binds)
