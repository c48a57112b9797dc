"""What the ESL end-to-end tests share: the approaches, and an Env over a cluster and its Backend.

- "extender": a cluster in extender mode, ESLs through its policy API (ExtenderBackend).
- "pure": a cluster with no extender service at all (mode "none"), ESLs patching the Node
  objects directly (NodeBackend); kube-scheduler alone enforces the resources.
- "dra": a cluster in mode dra, ESLs through its policy API, the resources published as DRA
  devices; kube-scheduler alone allocates them (its DynamicResources plugin).

Imported by tests/e2e/esl/ (pytest puts this directory on sys.path); conftest.py there
gives each module its `env`.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from escher_harness import localcluster
from escher_harness.kubeclient import api_client
from escher_harness.workload import Placement, Workload, pod_manifest
from extender.esl.backends import ExtenderBackend
from extender.esl.base import ESL, UNBOUNDED, UNBOUNDED_DRA, Backend, PodRequest
from extender.esl.client import PolicyClient
from extender.esl.kube.nodestatus import NodeBackend

APPROACHES = ["extender", "pure", "dra"]
# The cluster's mode for each approach.
MODES = {"extender": "extender", "pure": "none", "dra": "dra"}
_seq = itertools.count()


class Env:
    def __init__(self, approach: str, info: localcluster.ClusterInfo) -> None:
        self.approach = approach
        self.info = info
        self.domain = info.resource_domain
        api = api_client(info.kubeconfig)
        self.work = Workload(api)
        self.backend: Backend
        if approach in ("extender", "dra"):
            assert info.extender_url and info.token
            self.policy = PolicyClient(info.extender_url, info.token)
            self.backend = ExtenderBackend(
                self.policy,
                self.domain,
                in_path=approach == "extender",
                unbounded=UNBOUNDED_DRA if approach == "dra" else UNBOUNDED,
            )
        else:
            self.backend = NodeBackend(api, self.domain)

    def pods(self, req: PodRequest, n: int, cpu: str | None = None, prefix: str = "p") -> list[str]:
        """Create n pods asking `req` (and `cpu`, if given); their names."""
        names = [f"{prefix}{next(_seq)}" for _ in range(n)]
        limits = dict(req.limits)
        if cpu:
            limits.setdefault("cpu", cpu)
        for name in names:
            self.work.create(
                pod_manifest(name, limits=limits, labels=req.labels, annotations=req.annotations)
            )
        return names

    def filler(self, node: str, cpu: str) -> str:
        """A pod bound straight to `node` taking `cpu` (no scheduler: it is already placed)."""
        name = f"filler{next(_seq)}"
        manifest: dict[str, Any] = pod_manifest(name, requests={"cpu": cpu})
        manifest["spec"]["nodeName"] = node
        self.work.create(manifest)
        return name

    def on_nodes(self) -> dict[str, set[str]]:
        """The domain's resources on each Node object (capacity and allocatable alike), or in
        mode dra in each node's ResourceSlices."""
        if self.approach == "dra":
            published = self.work.published(self.domain, f"{self.domain}/resource")
            return {
                n: {f"{self.domain}/{r}" for r in published.get(n, {})} for n in self.info.nodes
            }
        out: dict[str, set[str]] = {}
        for node in self.info.nodes:
            got = self.work.node_resources(node, self.domain + "/")
            assert got["capacity"] == got["allocatable"], got
            out[node] = set(got["capacity"])
        return out

    def torn_down(self, esl: ESL, timeout: float = 15.0) -> None:
        """Tear `esl` down and check that none of its resources is left on any Node."""
        created = set(esl.resources())
        assert created, "the ESL created nothing to tear down"
        esl.teardown()
        assert esl.resources() == []
        deadline = time.monotonic() + timeout
        while True:
            left = {n: rs & created for n, rs in self.on_nodes().items() if rs & created}
            if not left:
                return
            assert time.monotonic() < deadline, f"left on the nodes: {left}"
            time.sleep(0.2)


def nodes_of(placed: dict[str, Placement]) -> Counter[str]:
    return Counter(p.node for p in placed.values() if p.node)


def wait_stepping(
    env: Env, esl: Any, names: Sequence[str], timeout: float, bound: int | None = None
) -> dict[str, Placement]:
    """Wait for `bound` of `names` (default all) to be placed, calling esl.step() meanwhile,
    as an application drives a dynamic policy."""
    want = len(names) if bound is None else bound
    deadline = time.monotonic() + timeout
    while True:
        placed = env.work.placements(names)
        if sum(1 for p in placed.values() if p.node) >= want or time.monotonic() > deadline:
            return placed
        esl.step()
        time.sleep(0.3)
