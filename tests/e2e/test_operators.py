"""The workload operators of issue 60, built by `make operators`, started as local processes
beside the real control plane (escher_harness.localcluster.operators) and reconciling:

- KubeRay (--batch-scheduler=scheduler-plugins): a gang-labelled RayCluster of a head and two
  workers gets a PodGroup of its name with minMember 3, and its three pods the schedulerName
  scheduler-plugins-scheduler and the PodGroup's label; deleting it deletes them.
- The training operator (--gang-scheduler-name): a PyTorchJob of a master and a worker gets a
  PodGroup of its name with minMember 2, and its pods that schedulerName and the label; its
  validating webhook (registered by the harness at its loopback port) refuses two masters.
- Kueue (batch/job): a queued Job is suspended by Kueue's webhook at creation (served on
  loopback, registered by the harness), admitted against a ClusterQueue's quota, resumed, and
  its pods created, with the default scheduler, no PodGroup, and the workload's name (the
  gang) in an annotation; a v1beta1 ClusterQueue is converted to v1beta2 by Kueue's conversion
  webhook, on the same loopback server.

Nothing here schedules a gang: the pods of the first two wait for a scheduler of that name.
A test whose operator is not built is skipped, naming what is missing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from escher_harness import localcluster
from escher_harness.kubeclient import api_client
from escher_harness.localcluster import operators
from escher_harness.waits import until

pytestmark = [pytest.mark.e2e, pytest.mark.cluster(nodes=2, mode="none")]

PODGROUP_LABEL = "scheduling.x-k8s.io/pod-group"
NS = "default"


@pytest.fixture(scope="module")
def built() -> list[str]:
    """The operators that are built; the module is skipped, before its cluster starts, if none."""
    names = [name for name in operators.OPERATORS if not operators.missing([name])]
    if not names:
        pytest.skip("; ".join(operators.missing()))
    return names


@pytest.fixture(scope="module")
def running(built: list[str], cluster: localcluster.ClusterInfo) -> Iterator[operators.Operators]:
    """Every operator that is built, started once for the module."""
    # A generous start: at a load of 20 on 2 cores the apiserver took over 90 s to publish
    # KubeRay's megabyte CRDs (2026-11-29).
    ops = operators.start(built, cluster, timeout=600)
    try:
        yield ops
    finally:
        ops.stop()


def needs(ops: operators.Operators, name: str) -> None:
    if not any(r.name == name for r in ops.records):
        pytest.skip("; ".join(operators.missing([name])))


def container(name: str, cpu: str = "100m") -> dict[str, Any]:
    return {"name": name, "image": name, "resources": {"requests": {"cpu": cpu}}}


def pods(core: client.CoreV1Api, selector: str) -> list[client.V1Pod]:
    return list(core.list_namespaced_pod(NS, label_selector=selector).items)


def podgroup(custom: client.CustomObjectsApi, name: str) -> dict[str, Any]:
    group, version = "scheduling.x-k8s.io", "v1alpha1"
    return dict(custom.get_namespaced_custom_object(group, version, NS, "podgroups", name))


def test_kuberay_gives_a_gang_labelled_raycluster_a_podgroup_and_the_scheduler_plugins_name(
    running: operators.Operators,
) -> None:
    needs(running, "kuberay")
    api = api_client(running.kubeconfig)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    template = {"spec": {"containers": [container("ray")]}}
    ray_cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "rc", "labels": {"ray.io/gang-scheduling-enabled": "true"}},
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": template},
            "workerGroupSpecs": [
                {
                    "groupName": "workers",
                    "replicas": 2,
                    "minReplicas": 2,
                    "maxReplicas": 2,
                    "rayStartParams": {},
                    "template": template,
                }
            ],
        },
    }
    custom.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", ray_cluster)
    made = until(lambda: len(p := pods(core, "ray.io/cluster=rc")) == 3 and p, "rc's 3 pods")
    assert {p.spec.scheduler_name for p in made} == {operators.GANG_SCHEDULER_NAME}
    assert {p.metadata.labels.get(PODGROUP_LABEL) for p in made} == {"rc"}
    assert podgroup(custom, "rc")["spec"]["minMember"] == 3
    custom.delete_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", "rc")
    until(lambda: not pods(core, "ray.io/cluster=rc"), "rc's pods deleted with it")


def test_the_training_operator_gives_a_pytorchjob_a_podgroup_and_the_gang_scheduler_name(
    running: operators.Operators,
) -> None:
    needs(running, "training-operator")
    api = api_client(running.kubeconfig)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)

    def replicas() -> dict[str, Any]:
        return {
            "replicas": 1,
            "restartPolicy": "OnFailure",
            "template": {"spec": {"containers": [container("pytorch")]}},
        }

    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt"},
        "spec": {"pytorchReplicaSpecs": {"Master": replicas(), "Worker": replicas()}},
    }
    custom.create_namespaced_custom_object("kubeflow.org", "v1", NS, "pytorchjobs", job)
    selector = "training.kubeflow.org/job-name=pt"
    made = until(lambda: len(p := pods(core, selector)) == 2 and p, "pt's master and worker")
    assert {p.spec.scheduler_name for p in made} == {running.gang_scheduler_name}
    assert {p.metadata.labels.get(PODGROUP_LABEL) for p in made} == {"pt"}
    assert podgroup(custom, "pt")["spec"]["minMember"] == 2
    custom.delete_namespaced_custom_object("kubeflow.org", "v1", NS, "pytorchjobs", "pt")
    # Its validating webhook, on the operator's port, refuses a second master.
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    with pytest.raises(client.ApiException, match="must be 1"):
        custom.create_namespaced_custom_object("kubeflow.org", "v1", NS, "pytorchjobs", job)


def test_kueue_suspends_a_queued_job_at_creation_admits_it_within_quota_and_resumes_it(
    running: operators.Operators,
) -> None:
    needs(running, "kueue")
    api = api_client(running.kubeconfig)
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    custom = client.CustomObjectsApi(api)
    group, version = "kueue.x-k8s.io", "v1beta2"
    flavor = {"apiVersion": f"{group}/{version}", "kind": "ResourceFlavor"}
    custom.create_cluster_custom_object(
        group, version, "resourceflavors", {**flavor, "metadata": {"name": "flavor"}}
    )
    quota = [{"name": "cpu", "nominalQuota": "1"}, {"name": "memory", "nominalQuota": "1Gi"}]
    cluster_queue = {
        "apiVersion": f"{group}/{version}",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [{"name": "flavor", "resources": quota}],
                }
            ],
        },
    }
    custom.create_cluster_custom_object(group, version, "clusterqueues", cluster_queue)
    local_queue = {
        "apiVersion": f"{group}/{version}",
        "kind": "LocalQueue",
        "metadata": {"name": "lq"},
        "spec": {"clusterQueue": "cq"},
    }
    custom.create_namespaced_custom_object(group, version, NS, "localqueues", local_queue)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "queued", "labels": {operators.QUEUE_LABEL: "lq"}},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [container("work", "200m")]}
            },
        },
    }
    created = batch.create_namespaced_job(NS, job)
    assert created.spec.suspend is True  # Kueue's defaulting webhook, on loopback
    until(
        lambda: batch.read_namespaced_job("queued", NS).spec.suspend is False,
        "the Job admitted and resumed by Kueue",
        timeout=60,
    )
    workloads = custom.list_namespaced_custom_object(group, version, NS, "workloads")["items"]
    (workload,) = [w for w in workloads if w["metadata"]["ownerReferences"][0]["name"] == "queued"]
    assert workload["status"]["admission"]["clusterQueue"] == "cq"
    made = until(lambda: len(p := pods(core, "job-name=queued")) == 2 and p, "the Job's 2 pods")
    assert {p.spec.scheduler_name for p in made} == {"default-scheduler"}
    # What Kueue writes into the admitted pods' template: no PodGroup, but the workload (its
    # gang) by name, the PodSet, and the queues.
    for pod in made:
        labels, annotations = pod.metadata.labels, pod.metadata.annotations or {}
        assert PODGROUP_LABEL not in labels
        assert annotations.get("kueue.x-k8s.io/workload") == workload["metadata"]["name"]
        assert labels.get("kueue.x-k8s.io/podset") == "main"
        assert labels.get("kueue.x-k8s.io/local-queue-name") == "lq"
        assert labels.get("kueue.x-k8s.io/cluster-queue-name") == "cq"
    batch.delete_namespaced_job("queued", NS, propagation_policy="Background")


def test_kueue_converts_a_v1beta1_clusterqueue_through_its_loopback_conversion_webhook(
    running: operators.Operators,
) -> None:
    needs(running, "kueue")
    custom = client.CustomObjectsApi(api_client(running.kubeconfig))
    old = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "old"},
        "spec": {"cohort": "team", "namespaceSelector": {}},
    }
    custom.create_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", old)
    # v1beta2 renamed the field: without the webhook the apiserver would drop it.
    new = custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", "old")
    assert new["spec"]["cohortName"] == "team"
    custom.delete_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", "old")


def test_cluster_up_starts_the_operators_and_down_stops_them(tmp_path: Path) -> None:
    """`cluster up --operators` as a user runs it: the operators are the cluster's components
    (status lists them ready), and `down` stops them and removes their files."""
    if problems := operators.missing(["kuberay"]):
        pytest.skip("; ".join(problems))
    d, cli = tmp_path / "c", [sys.executable, "-m", "extender", "cluster"]
    up = subprocess.run(
        [*cli, "up", "--dir", str(d), "--nodes", "1", "--operators", "kuberay"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr[-2000:]
        shown = json.loads(
            subprocess.run([*cli, "status", "--dir", str(d), "--json"], capture_output=True,
                           text=True, check=True, timeout=60).stdout
        )  # fmt: skip
        kuberay = {c["name"]: c for c in shown["components"]}["kuberay"]
        assert kuberay["alive"] and kuberay["healthy"] and shown["healthy"], shown
        pid = kuberay["pid"]
        assert (d / "operators").is_dir()
    finally:
        subprocess.run([*cli, "down", "--dir", str(d)], check=True, timeout=120)
    until(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid), "kuberay stopped", 10)
    assert not d.exists()


def _zombie(pid: int) -> bool:
    """Stopped but not yet reaped (its parent, `cluster up`, has exited: init reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except OSError:
        return True
