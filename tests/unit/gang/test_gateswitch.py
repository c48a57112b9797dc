"""The adaptive gang gate's switch against a scripted API server (tests/unit/service/fakeapi.py):
it merge-patches the ConfigMap's `hold`, creates the ConfigMap when missing, writes only a
change, nothing as a follower, and retries a failed write at the next set."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
from fakeapi import FakeAPI

from extender.gang.args import GangArgs
from extender.gang.kube.gateswitch import GateSwitch
from extender.kube.client import KubeAPI
from extender.metrics import Metrics

CM = "/api/v1/namespaces/escher-system/configmaps"


def test_the_switch_writes_each_change_once_creating_the_config_map(tmp_path: Path) -> None:
    seen: list[tuple[str, str, dict[str, object]]] = []
    exists = False
    fail = False

    def server(request: httpx.Request) -> httpx.Response:
        nonlocal exists
        seen.append((request.method, request.url.path, json.loads(request.content)))
        if fail:
            return httpx.Response(500, json={"kind": "Status", "message": "scripted"})
        if request.method == "PATCH" and not exists:
            return httpx.Response(404, json={"kind": "Status", "message": "not found"})
        exists = True
        return httpx.Response(200, json={})

    async def settle(switch: GateSwitch) -> None:
        while switch._task is not None and not switch._task.done():
            await asyncio.sleep(0.01)

    async def scenario() -> Metrics:
        nonlocal fail
        metrics = Metrics()
        leading = False
        async with FakeAPI(server, tmp_path) as fake:
            api = KubeAPI(fake.kubeconfig, qps=100, burst=10)
            args = GangArgs(gate_switch="escher-system/escher-gang-gate")
            switch = GateSwitch(api, args, metrics, lambda: leading)
            switch.set(True)  # a follower writes nothing
            await settle(switch)
            leading = True
            switch.set(True)  # missing: patched, then created
            await settle(switch)
            switch.set(True)  # no change: nothing sent
            await settle(switch)
            fail = True
            switch.set(False)  # refused: not taken as written
            await settle(switch)
            fail = False
            switch.set(False)  # so the next set writes it
            await settle(switch)
            await switch.aclose()
            await api.aclose()
        return metrics

    metrics = asyncio.run(scenario())
    hold = {"data": {"hold": "true"}}
    release = {"data": {"hold": "false"}}
    assert seen[0] == ("PATCH", f"{CM}/escher-gang-gate", hold)
    assert seen[1][:2] == ("POST", CM) and seen[1][2]["data"] == {"hold": "true"}
    assert seen[1][2]["metadata"] == {"name": "escher-gang-gate", "namespace": "escher-system"}
    assert seen[2:] == [("PATCH", f"{CM}/escher-gang-gate", release)] * 2
    assert metrics.gang_gate_hold._value.get() == 0
