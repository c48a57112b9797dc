"""The e2e tests' hands on gangs that real operators make (issue 60): the operator's pods, the
extender's GET /v1/gangs and the nodes' room. Used by tests/e2e/test_training.py
(PyTorchJobs) and tests/e2e/test_kuberay.py (RayClusters), each subclassing `OperatorGangs`
with how its operator labels a job's pods.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import httpx
from kubernetes import client

from escher_harness import localcluster
from escher_harness.kubeclient import api_client
from escher_harness.waits import scheduling_attempts, until

NS = "default"
WAIT = 120.0  # seconds: generous for a loaded machine; every wait ends on its condition


class OperatorGangs:
    """One operator's jobs on one cluster; `selector(name)` finds a job's pods."""

    def __init__(self, info: localcluster.ClusterInfo) -> None:
        self.info = info
        self.api = api_client(info.kubeconfig)
        self.core, self.custom = client.CoreV1Api(self.api), client.CustomObjectsApi(self.api)

    def selector(self, name: str) -> str:
        raise NotImplementedError

    def pods(self, name: str) -> list[client.V1Pod]:
        return list(self.core.list_namespaced_pod(NS, label_selector=self.selector(name)).items)

    def nodes(self, name: str) -> dict[str, str | None]:
        """Each of the job's pods and the node it is bound to (None: not bound)."""
        return {p.metadata.name: p.spec.node_name for p in self.pods(name)}

    def bound_whole(self, name: str, members: int) -> dict[str, str]:
        """The pods' nodes once exactly `members` exist and all are bound; empty until then."""
        nodes = self.nodes(name)
        whole = len(nodes) == members and all(nodes.values())
        return {p: n for p, n in nodes.items() if n} if whole else {}

    def gang(self, name: str) -> dict[str, Any]:
        """The extender's GET /v1/gangs entry for the job's gang; empty if none."""
        r = httpx.get(
            f"{self.info.extender_url}/v1/gangs",
            headers={"Authorization": f"Bearer {self.info.token}"},
        )
        r.raise_for_status()
        return next((g for g in r.json() if g["gang"] == f"{NS}/{name}"), {})

    def waiting_whole(
        self, create: Callable[[], None], name: str, members: int, reason: str
    ) -> str:
        """`create()` the job; wait until its gang waits with `reason` in /v1/gangs and
        kube-scheduler has tried `members` pods since (the positive control), then check that
        none of its pods is bound. Returns the reason in full."""
        tried = scheduling_attempts(self.info, "unschedulable")
        create()
        why: str = until(
            lambda: reason in (r := self.gang(name).get("reason", "")) and r,
            f"{name}'s reason in /v1/gangs",
            timeout=WAIT,
        )
        until(
            lambda: scheduling_attempts(self.info, "unschedulable") >= tried + members,
            f"kube-scheduler tried each of {name}'s members",
            timeout=WAIT,
        )
        nodes = self.nodes(name)
        assert len(nodes) == members and not any(nodes.values()), nodes
        assert self.gang(name)["phase"] == "waiting"
        return why

    def released(self, name: str) -> None:
        """Wait until the job's pods are gone and the extender lists no gang of its name
        (every reservation released)."""
        until(lambda: not self.pods(name), f"{name}'s pods deleted with it", timeout=WAIT)
        until(lambda: not self.gang(name), f"{name} gone from /v1/gangs", timeout=WAIT)

    def reservations(self) -> float:
        """Places the extender's ledger holds for gangs now (its holdings gauge)."""
        text = httpx.get(f"{self.info.extender_url}/metrics").text
        found = re.search(r'escher_ledger_holdings\{kind="reservation"\} (\S+)', text)
        return float(found.group(1)) if found else 0.0

    def used_cpu(self) -> dict[str, int]:
        """Millicpu requested by the pods bound to each node (to check none is over)."""
        used: dict[str, int] = {}
        for p in self.core.list_pod_for_all_namespaces().items:
            if p.spec.node_name and p.status.phase not in ("Succeeded", "Failed"):
                for c in p.spec.containers:
                    cpu = ((c.resources and c.resources.requests) or {}).get("cpu", "0")
                    m = int(cpu[:-1]) if cpu.endswith("m") else int(float(cpu) * 1000)
                    used[p.spec.node_name] = used.get(p.spec.node_name, 0) + m
        return used

    def no_node_over(self, node_cpu: int) -> None:
        used = self.used_cpu()
        assert all(v <= node_cpu * 1000 for v in used.values()), used
