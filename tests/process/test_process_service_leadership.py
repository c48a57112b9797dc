"""A replicated extender's policy changes when the API server goes away, against a scripted
API server (tests/fakeapi.py) with a Lease, on short lease times: a change that is not
confirmed on the nodes is answered 503 (never a 202 that a step-down could drop), a leader
whose renewals go unanswered takes no change at all, and a replica that steps down drops
what it had not written and does not write it when it leads again. One replica keeps 202.

In the process tier: the leases are waited out in real time.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakeapi import FakeAPI

from extender.app import create_app
from extender.kube.client import KubeAPI
from extender.service import Service
from extender.settings import Settings

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
TOKEN = "t" * 32


class Server:
    """One node (escher.io/r: 2), no pods, a Lease kept with resourceVersion preconditions.
    `down`: nothing answers (connection refused); `patches_fail`: node status patches get a
    500, everything else answers."""

    def __init__(self) -> None:
        self.down = False
        self.patches_fail = False
        self.node_version = 5
        self.shown = {"escher.io/r": "2"}
        self.lease: dict[str, Any] | None = None
        self.lease_version = 0
        self.patches: list[dict[str, Any]] = []

    def node(self) -> dict[str, Any]:
        resources = {"cpu": "4", "pods": "10", **self.shown}
        return {
            "metadata": {"name": "n0", "resourceVersion": str(self.node_version)},
            "status": {"capacity": resources, "allocatable": dict(resources)},
        }

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        path, method = request.url.path, request.method
        if request.url.params.get("watch"):
            return httpx.Response(200, content=b"")
        if path == "/api/v1/nodes":
            return httpx.Response(
                200, json={"metadata": {"resourceVersion": "9"}, "items": [self.node()]}
            )
        if path == "/api/v1/pods":
            return httpx.Response(200, json={"metadata": {"resourceVersion": "9"}, "items": []})
        if path == "/api/v1/nodes/n0/status":
            if method == "PATCH":
                if self.patches_fail:
                    return httpx.Response(500, json={"kind": "Status", "message": "etcd is slow"})
                patch = json.loads(request.content)
                self.patches.append(patch)
                for k, v in patch["status"]["allocatable"].items():
                    if v is None:
                        self.shown.pop(k, None)
                    else:
                        self.shown[k] = v
                self.node_version += 1
            return httpx.Response(200, json=self.node())
        if path.endswith("selfsubjectaccessreviews"):
            return httpx.Response(200, json={"status": {"allowed": True}})
        if path.startswith(LEASES):
            return self.leases(method, json.loads(request.content) if request.content else None)
        return httpx.Response(404, json={"message": f"no {path}"})

    def leases(self, method: str, body: dict[str, Any] | None) -> httpx.Response:
        if method == "GET":
            if self.lease is None:
                return httpx.Response(404, json={"message": "not found"})
            return httpx.Response(200, json=self.lease)
        assert body is not None
        if method == "POST" and self.lease is not None:
            return httpx.Response(409, json={"message": "exists"})
        if method == "PUT" and body["metadata"].get("resourceVersion") != str(self.lease_version):
            return httpx.Response(409, json={"message": "modified"})
        self.lease_version += 1
        body["metadata"]["resourceVersion"] = str(self.lease_version)
        self.lease = body
        return httpx.Response(200, json=body)


def service(
    tmp_path: Path, server: Server, leader_elect: bool, renew_deadline: float = 1.0
) -> tuple[Service, FakeAPI]:
    fake = FakeAPI(server, tmp_path)
    settings = Settings(
        kubeconfig=fake.kubeconfig,
        policy_objects=False,  # the in-memory store: tests/unit/policies/test_policies.py
        token=TOKEN,
        writeback_coalesce_seconds=0,
        writeback_wait_seconds=0.3,
        writeback_backoff_initial_seconds=0.05,
        writeback_backoff_max_seconds=0.1,
        leader_elect=leader_elect,
        lease_duration_seconds=renew_deadline + 0.5,
        renew_deadline_seconds=renew_deadline,
        retry_period_seconds=0.1,
    )
    return Service(settings, api=KubeAPI(fake.kubeconfig)), fake


async def until(check: Any, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.02)


def capacity(svc: Service) -> int | None:
    view = svc.ledger.node("n0")
    assert view is not None
    return view.ephemeral.get("escher.io/r")


def run(
    tmp_path: Path, server: Server, leader_elect: bool, scenario: Any, renew_deadline: float = 1.0
) -> None:
    svc, fake = service(tmp_path, server, leader_elect, renew_deadline)
    app = create_app(svc.settings, svc, lifecycle=False)

    async def main() -> None:
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            fake,
            httpx.AsyncClient(transport=transport, base_url="http://x", headers=headers) as c,
        ):
            await svc.start()
            try:
                await until(lambda: svc.ready()[0])
                await scenario(svc, c)
            finally:
                await svc.stop()

    asyncio.run(main())


@pytest.mark.parametrize(("leader_elect", "status"), [(False, 202), (True, 503)])
def test_a_change_not_confirmed_in_time_is_202_alone_and_503_with_replicas(
    tmp_path: Path, leader_elect: bool, status: int
) -> None:
    server = Server()

    async def scenario(svc: Service, c: httpx.AsyncClient) -> None:
        server.patches_fail = True
        for _ in range(5):
            await until(lambda: svc.accepting()[0])
            reply = await c.put("/v1/resources/r", json={"capacity": 5, "node": "n0"})
            # A loaded machine can hold the loop past a lease renewal: that refusal (it
            # changed nothing) is another test's; try again once renewals are answered.
            if "renewals are not answered" not in reply.text:
                break
        assert reply.status_code == status, reply.text
        if status == 503:
            assert "not confirmed on the nodes" in reply.json()["error"]
            assert reply.headers["retry-after"] == "1"
        else:
            assert reply.json()["durable"] is False
        # Either way the leader keeps writing it while it leads: it lands once patches do.
        server.patches_fail = False
        await until(lambda: server.shown.get("escher.io/r") == "5")
        assert (
            await c.put("/v1/resources/r", json={"capacity": 5, "node": "n0"})
        ).status_code == 200

    run(tmp_path, server, leader_elect, scenario)


def test_a_leader_whose_renewals_go_unanswered_takes_no_change(tmp_path: Path) -> None:
    server = Server()

    async def scenario(svc: Service, c: httpx.AsyncClient) -> None:
        version = svc.ledger.version
        server.down = True
        await until(lambda: not svc.accepting()[0])
        assert svc.may_write()  # still the leader, for its renew deadline
        for call in (
            c.put("/v1/resources/r", json={"capacity": 5, "node": "n0"}),
            c.delete("/v1/resources/r"),
            c.post("/v1/esl/gang", json={"name": "g", "size": 2}),
        ):
            reply = await call
            assert reply.status_code == 503, reply.text
            assert "nothing was changed" in reply.json()["error"]
        assert svc.may_write()  # the refusals above came from a leader, not a follower
        assert svc.ledger.version == version and capacity(svc) == 2
        # Reads still answer.
        assert (await c.get("/v1/resources/r")).status_code == 200

    # A renew deadline wide enough that a loaded machine still makes the calls while this
    # replica leads (with 1 s, parallel test runs sometimes reached them as a follower).
    run(tmp_path, server, True, scenario, renew_deadline=4.0)


def test_a_replica_that_steps_down_drops_what_it_had_not_written(tmp_path: Path) -> None:
    server = Server()

    async def scenario(svc: Service, c: httpx.AsyncClient) -> None:
        server.patches_fail = True
        reply = await c.put("/v1/resources/r", json={"capacity": 7, "node": "n0"})
        assert reply.status_code == 503 and capacity(svc) == 7
        server.down = True  # the API server goes away: the leader cannot renew
        await until(lambda: not svc.may_write())  # fenced at its renew deadline
        # Stepped down (its elector saw the loss): the ledger mirrors what the node showed,
        # the change is dropped. A write ending after the fence may mirror the node before
        # the elector's own attempt (held by the unreachable API server) reports the loss.
        await until(lambda: capacity(svc) == 2 and svc.metrics.is_leader._value.get() == 0)
        assert svc.kube.writeback.pending_nodes() == []
        server.down = server.patches_fail = False
        await until(svc.may_write)  # it leads again (nobody else was there)
        await asyncio.sleep(0.3)  # time for the write-back to verify every node
        assert server.shown["escher.io/r"] == "2" and capacity(svc) == 2
        assert not any(p["status"]["allocatable"].get("escher.io/r") == "7" for p in server.patches)

    run(tmp_path, server, True, scenario)
