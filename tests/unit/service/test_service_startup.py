"""The service's start-up against a scripted API server (fakeapi.py): every step is
retried until it succeeds, the verbs answer 503 until the ledger is built, and a request that
fails once (the first list, the first watch, the first write after the build) does not leave
the service unready."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import httpx
import pytest
from fakeapi import FakeAPI

from extender.kube.client import KubeAPI
from extender.service import Service
from extender.settings import Settings

NODE = {
    "metadata": {"name": "n0", "resourceVersion": "5", "labels": {"zone": "a"}},
    "status": {
        "capacity": {"cpu": "4", "pods": "10", "escher.io/r": "2"},
        "allocatable": {"cpu": "4", "pods": "10", "escher.io/r": "2"},
    },
}


class Server:
    """Answers lists, watches (which end at once) and status reads and patches; fails the
    first request of each kind named in `fail_once` with a 500."""

    def __init__(self, fail_once: set[str]) -> None:
        self.fail_once = set(fail_once)
        self.seen: Counter[str] = Counter()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path, params = request.url.path, request.url.params
        kind = (
            "watch"
            if params.get("watch")
            else f"{request.method} {path.rsplit('/', 1)[-1] if '/status' in path else path}"
        )
        self.seen[kind] += 1
        if kind in self.fail_once:
            self.fail_once.discard(kind)
            return httpx.Response(500, json={"kind": "Status", "message": "etcd is slow"})
        if kind == "watch":
            return httpx.Response(200, content=b"")  # ends at once: resumed after a backoff
        if path == "/api/v1/nodes":
            return httpx.Response(200, json={"metadata": {"resourceVersion": "9"}, "items": [NODE]})
        if path == "/api/v1/pods":
            return httpx.Response(200, json={"metadata": {"resourceVersion": "9"}, "items": []})
        if path.endswith("/status"):
            body = dict(NODE)
            if request.method == "PATCH":
                patch = json.loads(request.content)
                body = {**NODE, "status": {**NODE["status"], **patch["status"]}}
            return httpx.Response(200, json=body)
        return httpx.Response(404, json={"message": f"no {path}"})


def service(tmp_path: Path, server: Server) -> tuple[Service, FakeAPI]:
    fake = FakeAPI(server, tmp_path)
    settings = Settings(
        kubeconfig=fake.kubeconfig, writeback_coalesce_seconds=0, policy_objects=False
    )
    return Service(settings, api=KubeAPI(fake.kubeconfig)), fake


async def until_ready(svc: Service, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not svc.ready()[0]:
        assert asyncio.get_running_loop().time() < deadline, svc.ready()
        await asyncio.sleep(0.02)


@pytest.mark.parametrize(
    "fail_once",
    [
        pytest.param(set(), id="nothing-fails"),
        pytest.param({"GET /api/v1/nodes"}, id="the-first-list-of-nodes"),
        pytest.param({"GET /api/v1/pods"}, id="the-first-list-of-pods"),
        pytest.param({"watch"}, id="the-first-watch"),
        pytest.param({"PATCH status"}, id="the-first-write-after-the-build"),
    ],
)
def test_a_request_that_fails_once_does_not_leave_the_service_unready(
    tmp_path: Path, fail_once: set[str]
) -> None:
    server = Server(fail_once)
    svc, fake = service(tmp_path, server)

    async def scenario() -> None:
        assert svc.ready() == (False, "building the ledger from the cluster")
        async with fake:
            await svc.start()
            try:
                await until_ready(svc)
                # The node's written resources are the ledger's after the build.
                view = svc.ledger.node("n0")
                assert view is not None and view.ephemeral == {"escher.io/r": 2}
                # A change is written back, even when the first write failed (retried).
                svc.ledger.set_capacity("escher.io/r", {"n0": 3})
                assert await svc.wait_durable(svc.ledger.version, ["n0"])
                assert server.seen["PATCH status"] >= 1
            finally:
                await svc.stop()

    asyncio.run(scenario())
    assert not server.fail_once  # each scripted failure did happen


def test_the_verbs_answer_503_until_the_ledger_is_built(tmp_path: Path) -> None:
    from extender.app import create_app

    svc, fake = service(tmp_path, Server(set()))
    app = create_app(svc.settings, svc, lifecycle=False)

    async def scenario() -> list[tuple[int, str | None]]:
        transport = httpx.ASGITransport(app=app)
        async with fake, httpx.AsyncClient(transport=transport, base_url="http://x") as c:
            body = {"Pod": {"metadata": {"uid": "u"}}, "NodeNames": ["n0"]}
            before = await c.post("/filter", json=body)
            await svc.start()
            await until_ready(svc)
            after = await c.post("/filter", json=body)
            await svc.stop()
            return [(r.status_code, r.headers.get("connection")) for r in (before, after)]

    # A 503 closes the connection, so a client kept alive on a replica that cannot answer
    # (a follower, behind a Service) reconnects and is routed to one that can.
    assert asyncio.run(scenario()) == [(503, "close"), (200, None)]


@pytest.mark.parametrize("mode", ["extender", "standalone"])
def test_the_built_hook_runs_once_when_the_ledger_is_built_before_ready(
    tmp_path: Path, mode: str
) -> None:
    # extender.server freezes the garbage collector's view of the startup state there: the
    # ledger must be complete by then, and nothing answered yet.
    fake = FakeAPI(Server(set()), tmp_path)
    calls: list[tuple[bool, list[str]]] = []
    settings = Settings(
        mode=mode,  # type: ignore[arg-type]
        kubeconfig=fake.kubeconfig,
        writeback_coalesce_seconds=0,
        policy_objects=False,
    )
    api = KubeAPI(fake.kubeconfig) if settings.kube else None
    svc: Service

    def built() -> None:
        calls.append((svc.ready()[0], svc.ledger.node_names()))

    svc = Service(settings, api=api, on_built=built)

    async def scenario() -> None:
        async with fake:
            await svc.start()
            try:
                await until_ready(svc)
                await asyncio.sleep(0.05)
            finally:
                await svc.stop()

    asyncio.run(scenario())
    assert calls == [(False, ["n0"] if settings.kube else [])]
