"""The nominator against a scripted API server (tests/unit/service/fakeapi.py): a nomination
is a merge patch of the status subresource naming the pod's UID ("" clears it); a delayed
one is sent after the delay only if still wanted then (else counted unneeded), a later call
replaces it, and stop cancels the delayed ones."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from fakeapi import FakeAPI

from extender.core.pod import Keys, PodInfo
from extender.gang.args import GangArgs
from extender.gang.kube.nominator import Nominator
from extender.kube.client import KubeAPI
from extender.metrics import Metrics

KEYS = Keys.for_domain("escher.io")
DELAY = 0.05


def pod(name: str) -> PodInfo:
    return PodInfo(
        f"{name}-uid", "team", name, {}, {}, {KEYS.gang: "g"}, "g", 0, "", False, False, False, None
    )


def count(metrics: Metrics, outcome: str) -> float:
    return metrics.gang_nominations.labels(outcome)._value.get()


def run(
    tmp_path: Path, calls: list[tuple[str, str, bool | None]], stop_early: bool = False
) -> tuple[list[tuple[str, object]], Metrics]:
    """Make `calls` (pod, node, wanted: None for at once), wait past the delay (or stop at
    once), and return the patches seen (pod, nominatedNodeName) and the metrics."""
    seen: list[tuple[str, object]] = []

    def server(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert request.method == "PATCH"
        assert request.headers["content-type"] == "application/merge-patch+json"
        name = request.url.path.split("/")[-2]
        assert request.url.path == f"/api/v1/namespaces/team/pods/{name}/status"
        assert body["metadata"] == {"uid": f"{name}-uid"}
        seen.append((name, body["status"]["nominatedNodeName"]))
        return httpx.Response(200, json={})

    async def scenario() -> Metrics:
        metrics = Metrics()
        async with FakeAPI(server, tmp_path) as fake:
            api = KubeAPI(fake.kubeconfig, qps=100, burst=10)
            nominator = Nominator(
                api, metrics, lambda: True, GangArgs(nominate_delay_seconds=DELAY)
            )
            for name, node, wanted in calls:
                want = None if wanted is None else (lambda w=wanted: w)
                nominator(pod(name), node, want)
            if not stop_early:
                await asyncio.sleep(DELAY * 4)
                # A patch the server has answered is counted once its answer is read: on a
                # loaded machine that can come after the sleep, and aclose would cancel it.
                deadline = asyncio.get_running_loop().time() + 5
                while sum(count(metrics, o) for o in ("sent", "cleared", "failed")) < len(seen):
                    assert asyncio.get_running_loop().time() < deadline, seen
                    await asyncio.sleep(0.01)
            await nominator.aclose()
            await api.aclose()
        return metrics

    metrics = asyncio.run(scenario())
    return sorted(seen), metrics


@pytest.mark.parametrize(
    ("calls", "patches", "outcomes"),
    [
        ([("p0", "n1", None)], [("p0", "n1")], {"sent": 1}),
        ([("p0", "", None)], [("p0", None)], {"cleared": 1}),  # null removes the field
        ([("p0", "n1", True)], [("p0", "n1")], {"sent": 1}),
        ([("p0", "n1", False)], [], {"unneeded": 1}),  # its cycle came first
        # A later call for the pod replaces the delayed one: only the last is sent.
        ([("p0", "n1", True), ("p0", "n2", True)], [("p0", "n2")], {"sent": 1}),
        ([("p0", "n1", True), ("p0", "", None)], [("p0", None)], {"cleared": 1}),
        ([("p0", "n1", True), ("p1", "n2", False)], [("p0", "n1")], {"sent": 1, "unneeded": 1}),
    ],
)
def test_nominations_at_once_and_delayed(
    tmp_path: Path,
    calls: list[tuple[str, str, bool | None]],
    patches: list[tuple[str, object]],
    outcomes: dict[str, int],
) -> None:
    seen, metrics = run(tmp_path, calls)
    assert seen == patches
    for outcome in ("sent", "cleared", "unneeded", "failed", "deferred"):
        assert count(metrics, outcome) == outcomes.get(outcome, 0), outcome


def test_stop_cancels_the_delayed_nominations(tmp_path: Path) -> None:
    seen, metrics = run(tmp_path, [("p0", "n1", True), ("p1", "n2", True)], stop_early=True)
    assert seen == []
    assert count(metrics, "sent") == count(metrics, "unneeded") == 0
