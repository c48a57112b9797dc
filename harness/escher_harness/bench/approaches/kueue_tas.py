"""The kueue-tas approach: Kueue's Topology-Aware Scheduling (the real Kueue v0.17, built by
`make operators`) in front of the default kube-scheduler, as the ecosystem's answer to "keep
this job inside one rack or block" (issue 60, item 3).

Beside the cluster (`started`) run Kueue and a kube-controller-manager with the job
controller (escher_harness.localcluster.operators), both the cluster's components, so the
benchmark counts their CPU among the scheduling processes; then a Kueue `Topology` of the
footing's levels (zone, block, rack, then the hostname, so Kueue picks each pod's node), a
ResourceFlavor naming it whose nodeLabels match every node of the footing, a ClusterQueue
with quota for the whole cluster (quota never decides a result) and a LocalQueue. Each gang
is a batch Job of `size` pods that all run at once (parallelism = completions), queued
there, its PodSet annotated `podset-required-topology` or `podset-preferred-topology` with
the node label of the gang's level, as the scenario says (none in `no-topology`: Kueue then
places it unconstrained). Kueue admits the Job whole, assigns every pod a node inside the
domain, and lifts its topology gate; the default kube-scheduler binds it there. Its row is
in escher_harness.bench.approaches.registry.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from kubernetes import client

from escher_harness import localcluster
from escher_harness.bench.approaches.base import Approach, Env, Footing, GangJob, created, go_files
from escher_harness.kubeclient import api_client
from escher_harness.localcluster import operators
from escher_harness.localcluster.cluster import adopt
from escher_harness.localcluster.paths import cache_dir
from escher_harness.workload import Workload, pod_manifest
from extender.core.names import CPU, MEMORY
from extender.core.quantity import amount
from extender.gang.topology import DEFAULT, parse

KUEUE = ("kueue.x-k8s.io", "v1beta2")
NAME = "tas"  # of the Topology, the flavor and both queues
# Every node of this approach's cluster carries it, and so the flavor selects them all.
POOL = {"escher.example/pool": "tas"}
HOSTNAME = "kubernetes.io/hostname"
ANNOTATIONS = {
    "required": "kueue.x-k8s.io/podset-required-topology",
    "preferred": "kueue.x-k8s.io/podset-preferred-topology",
}
NAMESPACE = "default"
_POLL = 0.1  # seconds between looks at the watch for an admitted Job's pods


def topology() -> dict[str, Any]:
    """Kueue's Topology of the footing's levels (the keys fakenodes.Topology labels the nodes
    with, whatever their sizes), widest first, the hostname last."""
    keys = [lv.key for lv in parse(DEFAULT).levels if lv.key != HOSTNAME]
    return _kueue_object("Topology", {"levels": [{"nodeLabel": k} for k in (*keys, HOSTNAME)]})


def queue_objects(footing: Footing) -> list[tuple[str, dict[str, Any]]]:
    """(plural, body) of the Topology, flavor, ClusterQueue and LocalQueue, in creation
    order; the ClusterQueue's quota is every node's cpu and memory."""
    cpu_m = amount(CPU, footing.node_cpu, field="cpu") * footing.nodes
    memory = amount(MEMORY, footing.node_memory, field="memory") * footing.nodes
    quota = [{"name": "cpu", "nominalQuota": f"{cpu_m}m"},
             {"name": "memory", "nominalQuota": str(memory)}]  # fmt: skip
    flavor = _kueue_object("ResourceFlavor", {"nodeLabels": POOL, "topologyName": NAME})
    cluster_queue = _kueue_object(
        "ClusterQueue",
        {
            "namespaceSelector": {},
            "resourceGroups": [
                {"coveredResources": ["cpu", "memory"],
                 "flavors": [{"name": NAME, "resources": quota}]}
            ],
        },
    )  # fmt: skip
    local_queue = _kueue_object("LocalQueue", {"clusterQueue": NAME})
    local_queue["metadata"]["namespace"] = NAMESPACE
    return [
        ("topologies", topology()),
        ("resourceflavors", flavor),
        ("clusterqueues", cluster_queue),
        ("localqueues", local_queue),
    ]


def gang_job(job: GangJob, scheduler_name: str) -> dict[str, Any]:
    """The batch Job of one gang: `size` pods at once, queued in the LocalQueue, its PodSet
    annotated with the gang's level as the scenario asks (nothing without topology)."""
    a = job.arrival
    key = job.level_key()
    annotations = {ANNOTATIONS[job.topology]: key} if job.topology and key else {}
    pod = pod_manifest(
        a.name,
        requests={"cpu": a.cpu, "memory": a.memory},
        annotations=annotations,
        scheduler_name=scheduler_name,
    )
    pod["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": a.name, "labels": {operators.QUEUE_LABEL: NAME}},
        "spec": {
            "parallelism": a.size,
            "completions": a.size,
            "backoffLimit": 0,
            "template": {"metadata": {"annotations": annotations}, "spec": pod["spec"]},
        },
    }


def _kueue_object(kind: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "/".join(KUEUE), "kind": kind, "metadata": {"name": NAME},
            "spec": dict(spec)}  # fmt: skip


@dataclass(frozen=True)
class KueueTas(Approach):
    def cluster_spec(self, dir: Path, footing: Footing) -> localcluster.ClusterSpec:
        return footing.cluster_spec(dir, mode="none", node_labels=POOL)

    def started(self, info: localcluster.ClusterInfo, footing: Footing) -> localcluster.ClusterInfo:
        # Only the batch/job integration: Kueue's webhooks see no other kind.
        ops = operators.start(
            ["kueue"],
            info,
            kueue_frameworks=("batch/job",),
            # The schedulers' API budget: no token bucket of Kueue's or the job controller's
            # (20 qps by default, a pod's creation and its gate's lifting each a write)
            # decides a result.
            client_budget=(footing.client_qps, footing.client_burst),
            timeout=600,
        )
        info = adopt(info.dir, ops.records)  # `down` stops them with the cluster
        with api_client(info.kubeconfig) as api:
            custom = client.CustomObjectsApi(api)
            for plural, body in queue_objects(footing):
                if plural == "localqueues":
                    custom.create_namespaced_custom_object(*KUEUE, NAMESPACE, plural, body)
                else:
                    custom.create_cluster_custom_object(*KUEUE, plural, body)
        return info

    def submit(self, env: Env, job: GangJob) -> bool:
        a = job.arrival
        client.BatchV1Api(env.api).create_namespaced_job(
            NAMESPACE, cast(Any, gang_job(job, env.info.scheduler_name))
        )
        # The job controller makes the pods once Kueue has admitted the Job whole.
        end = time.monotonic() + job.deadline
        while len(pods := env.watch.pods_of(a.name)) < a.size and time.monotonic() < end:
            time.sleep(_POLL)
        return created(env, job, tuple(pods))

    def delete(self, env: Env, job: GangJob) -> None:
        client.BatchV1Api(env.api).delete_namespaced_job(
            job.name, NAMESPACE, propagation_policy="Background"
        )
        Workload(env.api).delete(env.pods.pop(job.name, ()))

    def code(self) -> list[Path] | None:
        mod = cache_dir() / "go" / "mod"
        kueue = [*mod.glob("sigs.k8s.io/kueue@*/pkg")]
        return go_files(
            p
            for root in kueue
            for pattern in ("cache/scheduler/tas_*.go", "scheduler/flavorassigner/tas_*.go",
                            "controller/tas/*.go", "util/tas/*.go")
            for p in root.glob(pattern)
        )  # fmt: skip

    def unavailable(self) -> str | None:
        problems = operators.missing(["kueue"])
        return "; ".join(problems) if problems else None
