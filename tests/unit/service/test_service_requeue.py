"""The requeue wired end to end in the service, against a scripted API server
(tests/unit/service/fakeapi.py): the filter turns a pod away while another holds the only unit of
escher.io/r; the holder's Succeeded arrives on the pod watch; the turned-away pod is then
patched with the requeued-at annotation, naming its UID, so that kube-scheduler retries it.
The race this closes, and why: extender/scheduling/requeue.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import builders
import httpx
from fakeapi import FakeAPI

from extender.app import create_app
from extender.kube.client import KubeAPI
from extender.service import Service
from extender.settings import Settings

NODE = {
    "metadata": {"name": "n0", "resourceVersion": "5"},
    "status": {
        "capacity": {"cpu": "4", "memory": "8Gi", "pods": "10", "escher.io/r": "1"},
        "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10", "escher.io/r": "1"},
    },
}


def pod(uid: str, node: str = "", phase: str = "Pending") -> dict[str, Any]:
    manifest = builders.pod(
        f"p-{uid}", uid=uid, limits={"escher.io/r": "1"}, node=node, phase=phase
    )
    manifest["metadata"]["resourceVersion"] = "7"
    return manifest


class Server:
    """One node with one unit of escher.io/r, held by pod `holder`; the pod watch stays open
    until `finish` is set, then reports the holder Succeeded (once). Records pod patches."""

    def __init__(self) -> None:
        self.finish = asyncio.Event()
        self.told = False  # the holder's Succeeded was sent on a pod watch
        self.patches: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.url.params.get("watch"):
            # Whenever the pod watch opens, before `finish` or after (under load it may open
            # after the test set it): it carries the holder's Succeeded once.
            if path == "/api/v1/pods" and not self.told:
                await self.finish.wait()
                self.told = True
                event = {"type": "MODIFIED", "object": pod("holder", "n0", "Succeeded")}
                return httpx.Response(200, content=json.dumps(event).encode() + b"\n")
            await asyncio.sleep(30)  # an open watch with nothing to say
            return httpx.Response(200, content=b"")
        if path == "/api/v1/nodes":
            return httpx.Response(200, json={"metadata": {"resourceVersion": "9"}, "items": [NODE]})
        if path == "/api/v1/pods":
            items = [pod("holder", "n0", "Running")]
            return httpx.Response(200, json={"metadata": {"resourceVersion": "9"}, "items": items})
        if path.endswith("/status"):
            return httpx.Response(200, json=NODE)
        if request.method == "PATCH" and path.startswith("/api/v1/namespaces/default/pods/"):
            self.patches.append((path, json.loads(request.content)))
            return httpx.Response(200, json=pod("w"))
        return httpx.Response(404, json={"message": f"no {path}"})


def test_a_pod_turned_away_is_touched_when_its_resource_frees(tmp_path: Path) -> None:
    server = Server()
    fake = FakeAPI(server, tmp_path)
    settings = Settings(
        kubeconfig=fake.kubeconfig, writeback_coalesce_seconds=0, policy_objects=False
    )
    svc = Service(settings, api=KubeAPI(fake.kubeconfig))
    app = create_app(settings, svc, lifecycle=False)

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=app)
        async with fake, httpx.AsyncClient(transport=transport, base_url="http://x") as c:
            await svc.start()
            try:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 5
                while not svc.ready()[0]:
                    assert loop.time() < deadline, svc.ready()
                    await asyncio.sleep(0.02)
                reply = await c.post("/filter", json={"Pod": pod("w"), "NodeNames": ["n0"]})
                assert reply.status_code == 200 and reply.json()["NodeNames"] == []
                assert server.patches == []  # nothing freed yet: nobody is touched
                server.finish.set()
                while not server.patches:
                    assert loop.time() < deadline + 5, "the turned-away pod was never touched"
                    await asyncio.sleep(0.02)
            finally:
                await svc.stop()

    asyncio.run(scenario())
    [(path, patch)] = server.patches
    assert path == "/api/v1/namespaces/default/pods/p-w"
    assert patch["metadata"]["uid"] == "w"
    assert set(patch["metadata"]["annotations"]) == {"escher.io/requeued-at"}
