"""Pods stating a preference are nominated for their preferred node, on the real control plane
(extender mode as deploy/ runs it: the marker policy sends them to prioritize).

kube-scheduler tries a nominated node alone before any other and, with one feasible node,
scores none: a pod whose nomination arrived before its cycle is placed on its preferred node
without a prioritize call. The pods here are created behind a scheduling gate of their own,
so that the nomination (sent 0.1 s after the extender sees the pod) is certain to arrive
before the cycle; the gate is then removed. A burst preferring one node is nominated there
only up to that node's room: kube-scheduler counts each nominated pod against its siblings,
so a nomination past the room would fail and that pod score every node.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from kubernetes import client

from escher_harness import localcluster
from escher_harness.bench.throughput import extender_metric
from escher_harness.kubeclient import api_client
from escher_harness.waits import until
from escher_harness.workload import Workload, pod_manifest
from extender.esl.client import PolicyClient

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.cluster(nodes=3, node_cpu="4", mode="extender", kwok=False),
]

GATE = "example.com/hold"
PRIORITIZE = 'escher_extender_request_seconds_count{verb="prioritize"}'
_names = itertools.count()


def prioritized(info: localcluster.ClusterInfo) -> float:
    calls = extender_metric(info, PRIORITIZE)
    assert calls is not None
    return calls


def only_on(info: localcluster.ClusterInfo, name: str, node: str) -> str:
    """Ephemeral resource `name`, one unit on `node` alone (durable): what the pods prefer."""
    assert info.extender_url is not None and info.token is not None
    with PolicyClient(info.extender_url, info.token) as policy:
        result = policy.set_resource(name, 1, node=node)
        assert result.durable, result
        return result.resource


def preferring(name: str, resource: str, cpu: str) -> dict[str, object]:
    return pod_manifest(
        name,
        requests={"cpu": cpu},
        annotations={"escher.io/prefer": resource},
        scheduling_gates=[GATE],
    )


def nominations(core: client.CoreV1Api, names: list[str]) -> dict[str, str]:
    out = {}
    for n in names:
        status = core.read_namespaced_pod_status(n, "default").status
        out[n] = status.nominated_node_name or ""
    return out


def ungate(core: client.CoreV1Api, names: list[str]) -> None:
    for n in names:
        core.patch_namespaced_pod(n, "default", [{"op": "remove", "path": "/spec/schedulingGates"}])


def test_a_preference_pod_is_placed_on_its_nominated_node_without_prioritize(
    cluster: localcluster.ClusterInfo,
) -> None:
    api = api_client(cluster.kubeconfig)
    work, core = Workload(api), client.CoreV1Api(api)
    n = next(_names)
    node = cluster.nodes[2]
    resource = only_on(cluster, f"pref-{n}", node)
    name = f"pref-{n}"
    work.create(preferring(name, resource, "500m"))
    try:
        until(lambda: nominations(core, [name])[name] == node, f"{name} nominated for {node}")
        before = prioritized(cluster)
        ungate(core, [name])
        assert work.wait([name], timeout=60)[name].node == node
        # One node evaluated: the nominated one fit, so nothing was scored.
        assert prioritized(cluster) == before
    finally:
        work.delete([name])


def test_a_burst_is_nominated_up_to_the_preferred_nodes_room(
    cluster: localcluster.ClusterInfo,
) -> None:
    """Six pods of 1 cpu prefer a node of 4: at most 4 are nominated there; every nominated
    pod lands on its node without prioritize, the others are scored and placed elsewhere."""
    api = api_client(cluster.kubeconfig)
    work, core = Workload(api), client.CoreV1Api(api)
    n = next(_names)
    node = cluster.nodes[1]
    resource = only_on(cluster, f"burst-{n}", node)
    names = [f"burst-{n}-{i}" for i in range(6)]
    for name in names:
        work.create(preferring(name, resource, "1"))
    try:
        # Each pod is decided once: nominated, or left without (the node is full).
        until(
            lambda: Counter(nominations(core, names).values())[node] == 4,
            f"4 pods nominated for {node}",
        )
        nominated = nominations(core, names)
        assert Counter(nominated.values()) == {node: 4, "": 2}, nominated
        before = prioritized(cluster)
        ungate(core, names)
        placed = work.wait(names, timeout=60)
        assert all(p.node for p in placed.values()), placed
        for name, target in nominated.items():
            if target:
                assert placed[name].node == target, (name, placed)
        assert Counter(p.node for p in placed.values())[node] <= 4, placed  # 4 cpu
        # Only the two pods without a nomination were scored.
        assert prioritized(cluster) == before + 2
    finally:
        work.delete(names)
