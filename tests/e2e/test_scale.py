"""On 1,000 nodes, a rare ephemeral resource (on 2 nodes) is found: every pod that fits binds
in extender mode, and the one that does not fit says why. kube-scheduler stops looking after
percentageOfNodesToScore of the nodes; with the domain visible to NodeResourcesFit and every
feasible node scored, the two nodes are always among them.

1,000 nodes is past the point where that share cuts the search (100 feasible nodes), so it
takes the same code paths as 5,000; the 5,000-node runs are `bench` presets, not tests."""

from __future__ import annotations

import time

import pytest

from escher_harness import localcluster
from escher_harness.bench.throughput import writeback_idle
from escher_harness.kubeclient import api_client
from escher_harness.workload import Workload, pod_manifest
from extender.esl.client import PolicyClient

NODES = 1000

# An API budget for 1,000 nodes: the extender writes its markers to every node once at start
# (1,000 node patches: 20 s at the default 50 QPS).
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.cluster(
        nodes=NODES,
        mode="extender",
        scope="every-pod",
        timeout=300,
        client_qps=500,
        client_burst=1000,
    ),
]
RARE = ("node-17", "node-942")


def test_a_resource_on_two_of_1000_nodes_is_found_for_every_pod_that_fits(
    cluster: localcluster.ClusterInfo,
) -> None:
    assert cluster.extender_url and cluster.token
    # What is timed is finding the resource, not the markers' first write running beside it.
    writeback_idle(cluster, timeout=120)
    with PolicyClient(cluster.extender_url, cluster.token, timeout=60) as policy:
        resources = [policy.set_resource("rare", 2, node=n).resource for n in RARE]
    work = Workload(api_client(cluster.kubeconfig))
    names = [f"rare-{i}" for i in range(5)]
    started = time.monotonic()
    for n in names:
        work.create(pod_manifest(n, limits={resources[0]: "1"}))
    placed = work.wait(names, timeout=60, bound=4, settle=3)
    bound = {n: p.node for n, p in placed.items() if p.node}
    took = time.monotonic() - started
    print(f"\n4 of 5 pods bound on 2 of {NODES} nodes in {took:.1f}s")
    assert sorted(bound.values()) == sorted([RARE[0], RARE[0], RARE[1], RARE[1]])
    (left,) = set(names) - set(bound)
    assert "Insufficient escher.io/rare" in placed[left].reason, placed[left].reason
