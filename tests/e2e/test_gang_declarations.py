"""Gangs declared as the objects users already have, on the real control plane (extender
mode, both PodGroup APIs served, kube-scheduler's own gang plugin off): a native
scheduling.k8s.io/v1beta1 PodGroup's minCount is all-or-nothing, a scheduler-plugins PodGroup
declares a gang without the extender's gang-min annotation, and a conflict or a missing
group is said on the pod, with nothing bound."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from escher_harness import localcluster
from escher_harness.kubeclient import api_client
from escher_harness.peers import (
    COSCHEDULING_GROUP,
    COSCHEDULING_LABEL,
    COSCHEDULING_VERSION,
    NATIVE_GROUP,
    NATIVE_VERSION,
)
from escher_harness.workload import Workload, pod_manifest

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.cluster(
        nodes=4, mode="extender", scope="every-pod", node_cpu="4", gang_declarations=True
    ),
]


def _group(api: client.ApiClient, group: str, version: str, name: str, spec: Any) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        group,
        version,
        "default",
        "podgroups",
        {
            "apiVersion": f"{group}/{version}",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": spec,
        },
    )


def _native_pod(name: str, group: str, **more: Any) -> dict[str, Any]:
    pod = pod_manifest(name, requests={"cpu": "1"}, **more)
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def _condition(api: client.ApiClient, name: str, timeout: float = 30) -> str:
    """The pod's PodScheduled message, once kube-scheduler wrote one."""
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod(name, "default")
        for c in pod.status.conditions or []:
            if c.type == "PodScheduled" and c.message:
                return str(c.message)
        time.sleep(0.2)
    raise AssertionError(f"pod {name} got no PodScheduled message in {timeout}s")


def test_native_podgroup_min_count_is_all_or_nothing(cluster: localcluster.ClusterInfo) -> None:
    api = api_client(cluster.kubeconfig)
    work = Workload(api)
    _group(api, NATIVE_GROUP, NATIVE_VERSION, "ng", {"schedulingPolicy": {"gang": {"minCount": 4}}})
    names = [f"ng-{i}" for i in range(4)]
    for n in names[:3]:
        work.create(_native_pod(n, "ng", scheduler_name=cluster.scheduler_name))
    # Three of four: each waits at the bind barrier, none binds.
    assert work.bound(names[:3], timeout=5) == 0
    work.create(_native_pod(names[3], "ng", scheduler_name=cluster.scheduler_name))
    assert work.bound(names, timeout=30) == 4


def test_scheduler_plugins_podgroup_declares_the_gang_without_gang_min(
    cluster: localcluster.ClusterInfo,
) -> None:
    api = api_client(cluster.kubeconfig)
    work = Workload(api)
    _group(api, COSCHEDULING_GROUP, COSCHEDULING_VERSION, "cg", {"minMember": 3})
    names = [f"cg-{i}" for i in range(3)]
    for n in names[:2]:
        work.create(
            pod_manifest(
                n,
                requests={"cpu": "1"},
                labels={COSCHEDULING_LABEL: "cg"},
                scheduler_name=cluster.scheduler_name,
            )
        )
    assert work.bound(names[:2], timeout=3) == 0
    work.create(
        pod_manifest(
            names[2],
            requests={"cpu": "1"},
            labels={COSCHEDULING_LABEL: "cg"},
            scheduler_name=cluster.scheduler_name,
        )
    )
    assert work.bound(names, timeout=30) == 3


def test_conflicts_and_missing_groups_are_said_and_nothing_binds(
    cluster: localcluster.ClusterInfo,
) -> None:
    api = api_client(cluster.kubeconfig)
    work = Workload(api)
    _group(api, NATIVE_GROUP, NATIVE_VERSION, "xb", {"schedulingPolicy": {"gang": {"minCount": 1}}})
    domain = cluster.resource_domain
    work.create(
        _native_pod(
            "x-conflict",
            "xb",
            labels={f"{domain}/gang": "xa"},
            scheduler_name=cluster.scheduler_name,
        )
    )
    work.create(_native_pod("x-missing", "nowhere", scheduler_name=cluster.scheduler_name))
    conflict = _condition(api, "x-conflict")
    assert "gang conflict" in conflict and "xa" in conflict and "xb" in conflict
    assert "does not exist" in _condition(api, "x-missing")
    assert work.bound(["x-conflict", "x-missing"], timeout=1) == 0
