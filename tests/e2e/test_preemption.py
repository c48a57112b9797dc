"""Preemption of an ephemeral resource's holder on the real control plane: a high-priority pod
asks for the one unit a low-priority pod holds; kube-scheduler's DefaultPreemption proposes
the holder as victim, the extender's preempt verb confirms it against its ledger, the holder
is evicted and the high-priority pod bound in its place."""

from __future__ import annotations

import re
import time

import httpx
import pytest
from kubernetes import client

from escher_harness import localcluster
from escher_harness.kubeclient import api_client
from escher_harness.workload import Workload, pod_manifest
from extender.esl.client import PolicyClient

pytestmark = [pytest.mark.e2e, pytest.mark.cluster(nodes=2, mode="extender", scope="every-pod")]


def metric(text: str, name: str, labels: str) -> float:
    m = re.search(rf"^{name}\{{{labels}\}} (\S+)$", text, re.MULTILINE)
    return float(m[1]) if m else 0.0


def test_a_high_priority_pod_preempts_the_low_priority_holder(
    cluster: localcluster.ClusterInfo,
) -> None:
    assert cluster.extender_url and cluster.token
    api = api_client(cluster.kubeconfig)
    scheduling = client.SchedulingV1Api(api)
    for name, value in (("low", 10), ("high", 1000)):
        scheduling.create_priority_class(
            client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=value)
        )
    with PolicyClient(cluster.extender_url, cluster.token) as policy:
        result = policy.set_resource("seat", 1, node="node-0")
        assert result.durable
    work = Workload(api)

    def pod(name: str, priority: str) -> dict[str, object]:
        manifest = pod_manifest(name, limits={result.resource: "1"})
        manifest["spec"]["priorityClassName"] = priority  # type: ignore[index]
        return manifest

    work.create(pod("holder", "low"))
    assert work.wait(["holder"], timeout=30)["holder"].node == "node-0"
    work.create(pod("urgent", "high"))
    placed = work.wait(["urgent"], timeout=60)["urgent"]
    assert placed.node == "node-0", placed.reason
    deadline = time.monotonic() + 30
    while work.placements(["holder"]):  # evicted
        assert time.monotonic() < deadline, "the holder was not evicted"
        time.sleep(0.2)
    metrics = httpx.get(f"{cluster.extender_url}/metrics").text
    assert metric(metrics, "escher_extender_decisions_total", 'outcome="kept",verb="preempt"') >= 1
    # The ledger agrees: one unit, held by the pod that preempted.
    with PolicyClient(cluster.extender_url, cluster.token) as policy:
        usage = policy.cluster_state().nodes["node-0"][result.resource]
        assert (usage.capacity, usage.allocated) == (1, 1)
