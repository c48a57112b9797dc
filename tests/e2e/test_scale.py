"""On 250 nodes, as deploy/ ships the extender (the split, two profiles): the pods that
need no exchange are sampled as kube-scheduler alone samples them, and still find a rare
ephemeral resource (on 2 nodes): every pod that fits binds, and the one that does not fit
says why. kube-scheduler stops looking after percentageOfNodesToScore of the *feasible* nodes
(48% at 250: 120 nodes; about 42% at 1,000), and NodeResourcesFit counts the written-back
resource, so the two nodes are always among them. The pods the extender decides (gang
members, preferences) are moved to the profile that looks at every node: a preference for
one node of 250 is met by every pod, which the sampled profile would meet for about 48% of
them.

250 nodes is past the point where that share cuts the search (100 feasible nodes; below 100
nodes kube-scheduler looks at all of them), so it takes the same code paths as 1,000 and
5,000; those sizes are `bench` presets, not tests."""

from __future__ import annotations

import time

import pytest

from escher_harness import localcluster
from escher_harness.bench.throughput import writeback_idle
from escher_harness.kubeclient import api_client
from escher_harness.workload import Workload, pod_manifest
from extender.esl.client import PolicyClient

NODES = 250

# An API budget for the nodes: the extender writes its markers to every node once at start
# (250 node patches: 5 s at the default 50 QPS).
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.cluster(
        nodes=NODES,
        mode="extender",
        timeout=300,
        client_qps=500,
        client_burst=1000,
    ),
]
RARE = ("node-17", "node-231")
PLAIN, ALL_NODES = "default-scheduler", "default-scheduler-all-nodes"


def test_a_resource_on_two_of_250_nodes_is_found_for_every_pod_that_fits(
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
    # They were placed by the profile that samples: no marker, no exchange.
    pods = work.core.list_namespaced_pod("default").items
    assert {p.spec.scheduler_name for p in pods if p.metadata.name in names} == {PLAIN}


def test_the_pods_the_extender_decides_look_at_every_node(
    cluster: localcluster.ClusterInfo,
) -> None:
    """Eight pods that prefer the one node with `near` (and request a unit of a resource on
    every node) all land there, and a gang's members bind whole: both were moved to the
    all-nodes profile by the marker policy, and a plain pod was not. Sampled at 48%, each
    preference pod would miss its node with probability 0.52 (all eight meet it by chance
    with probability ~0.003)."""
    assert cluster.extender_url and cluster.token
    writeback_idle(cluster, timeout=120)
    with PolicyClient(cluster.extender_url, cluster.token, timeout=60) as policy:
        wide = policy.set_resource("wide", 20).resource
        policy.set_resource("near", 100, node=RARE[1])
    work = Workload(api_client(cluster.kubeconfig))
    prefer = [f"prefer-{i}" for i in range(8)]
    gang = [f"gang-{i}" for i in range(4)]
    for n in prefer:
        work.create(pod_manifest(n, limits={wide: "1"}, annotations={"escher.io/prefer": "near"}))
    for n in gang:
        work.create(
            pod_manifest(
                n,
                requests={"cpu": "100m"},
                labels={"escher.io/gang": "wide-gang"},
                annotations={"escher.io/gang-min": str(len(gang))},
            )
        )
    work.create(pod_manifest("plain-0", requests={"cpu": "100m"}))
    placed = work.wait([*prefer, *gang, "plain-0"], timeout=120)
    assert {n: placed[n].node for n in prefer} == dict.fromkeys(prefer, RARE[1])
    assert all(placed[n].node for n in [*gang, "plain-0"]), placed
    names = {
        p.metadata.name: p.spec.scheduler_name
        for p in work.core.list_namespaced_pod("default").items
    }
    assert {n: names[n] for n in [*prefer, *gang]} == dict.fromkeys([*prefer, *gang], ALL_NODES)
    assert names["plain-0"] == PLAIN
