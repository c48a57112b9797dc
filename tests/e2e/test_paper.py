"""bench paper's experiments at a tiny size on the real control plane, their figures
checked against the cluster: E7 times every resource it creates and each waiting pod is
bound on its resource's node, kube-scheduler counting one scheduled pod per resource; E8
counts every pod bound and Succeeded, as kube-scheduler does; E1's job puts every task on
its chunk's node through its data resource and each runs the model's time; all leave no
resource and no pod behind. (The sizes of the paper are the benchmark's: `escher-extender
bench paper`.)"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from escher_harness import localcluster
from escher_harness.bench.paper import e1_locality, e7_creation, e8_makespan
from escher_harness.bench.paper.context import LABEL, Context
from escher_harness.kubeclient import api_client
from escher_harness.waits import scheduling_attempts
from extender.esl.client import PolicyClient

pytestmark = [pytest.mark.e2e, pytest.mark.cluster(nodes=4, mode="pure", kwok=True)]

RESOURCES = 4
PODS = 20


@pytest.fixture
def ctx(cluster: localcluster.ClusterInfo) -> Iterator[Context]:
    assert cluster.extender_url is not None
    with PolicyClient(cluster.extender_url, cluster.token) as policy:
        yield Context(cluster, api_client(cluster.kubeconfig), policy, random.Random(62), rep=1)


def _left(ctx: Context, prefix: str) -> tuple[list[str], list[str]]:
    """The experiment's resources still on a node, and its pods still there."""
    state = ctx.policy.cluster_state()
    names = sorted({r for node in state.nodes.values() for r in node if prefix in r})
    pods = client.CoreV1Api(ctx.api).list_namespaced_pod("default", label_selector=LABEL)
    return names, [str(p.metadata.name) for p in pods.items if p.metadata]


def test_e7_times_each_resource_until_its_pod_is_bound_on_it(
    cluster: localcluster.ClusterInfo, ctx: Context
) -> None:
    before = scheduling_attempts(cluster, "scheduled")
    r = e7_creation.measure(ctx, RESOURCES, clients=2)
    assert r["resources_timed"] == RESOURCES
    assert r["pods_on_their_resource_node"] == RESOURCES
    assert scheduling_attempts(cluster, "scheduled") - before == RESOURCES
    assert r["amortised_ms"] > 0 and r["calls_ms"] > 0
    assert _left(ctx, "e7-") == ([], [])


def test_e8_counts_every_pod_bound_and_succeeded(
    cluster: localcluster.ClusterInfo, ctx: Context
) -> None:
    before = scheduling_attempts(cluster, "scheduled")
    out: dict[str, Any] = {}
    e8_makespan.run(ctx, (2,), PODS, out)
    r = out["2"]
    assert (r["pods_bound"], r["pods_succeeded"]) == (PODS, PODS)
    assert scheduling_attempts(cluster, "scheduled") - before == PODS
    assert r["makespan_s"] >= r["last_bound_s"] > 0
    assert _left(ctx, "e8-") == ([], [])


def test_e1_places_each_task_on_its_chunks_node_and_runs_it_the_models_time(
    cluster: localcluster.ClusterInfo, ctx: Context
) -> None:
    before = scheduling_attempts(cluster, "scheduled")
    r = e1_locality.job(ctx, "pure", len(cluster.nodes), 0.01)
    assert (r["tasks_succeeded"], r["local_share"]) == (len(cluster.nodes), 1.0)
    assert scheduling_attempts(cluster, "scheduled") - before == len(cluster.nodes)
    # kwok ran each task the model's time, from its bind: no makespan below it
    assert r["makespan_s"] >= e1_locality.MODEL.kwok_seconds(0.01, local=True)
    assert _left(ctx, "e1-") == ([], [])
