"""Gangs behind Kueue, placed all or nothing by the extender, on the real control plane (issue 60).

The real Kueue (`make operators`), unchanged, admits batch Jobs and RayClusters against a
ClusterQueue's quota (a ResourceFlavor of the nodes' pool label, a LocalQueue, two
WorkloadPriorityClasses, preemption of lower priorities within the queue); the job controller
creates an admitted Job's pods and KubeRay a RayCluster's. Kueue makes no PodGroup: a Job is a
gang by the extender's own declaration in its pod template (label escher.io/gang, annotation
gang-min, schedulerName escher-scheduler), a RayCluster by KubeRay's PodGroup (its
gang-scheduling label). The extender runs as deploy/ ships it (mode extender, split scope).
On kwok nodes:

- an admitted Job short of room on the nodes waits whole and is bound whole once room frees;
- a Job over quota waits in Kueue, suspended, with no pod, until quota frees;
- a higher-priority Job preempts a bound one: Kueue suspends it, its pods go, and the
  extender releases what it held (its /v1/gangs entry, every place in the ledger);
- a Job deactivated and reactivated (Kueue suspends and resumes it) is placed again whole;
- a Job flapped between suspended and resumed leaves, once suspended, nothing bound or held,
  and once resumed, one whole gang; no node is ever over its cpu;
- a RayCluster behind Kueue is admitted and placed whole, and one over quota waits in Kueue;
- a PyTorchJob behind Kueue (the training operator's PodGroup its gang) likewise: admitted
  and placed whole, and one over quota waits in Kueue with no pod until quota frees;
- Kueue's own Topology-Aware Scheduling, through the gang benchmark's kueue-tas approach
  (its Topology, flavor, queues and Job, escher_harness.bench.approaches.kueue_tas): a gang
  that requires a rack is admitted with one rack assigned, and every member bound in it.

docs/integrations.md says what is honoured and what is not. Skipped when Kueue or KubeRay is
not built; the PyTorchJob test when the training operator is not.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from builders import KEYS, pod
from kubernetes import client
from operator_gangs import NS, OperatorGangs

from escher_harness import localcluster
from escher_harness.bench.approaches import kueue_tas
from escher_harness.bench.approaches.base import Footing, GangJob
from escher_harness.bench.scenario import GangArrival
from escher_harness.localcluster import operators
from escher_harness.localcluster.fakenodes import Topology
from escher_harness.waits import until

# The flavors' node label, which Kueue injects: kueue-tas's, so its flavor selects the nodes too.
POOL = kueue_tas.POOL
NODE_CPU = 2
MEMBERS = 3  # a Job's pods, or a RayCluster's head and two workers, of 1 cpu each
QUOTA_CPU = 3  # one gang's worth: a second waits in Kueue

pytestmark = [
    pytest.mark.e2e,
    # Two nodes of 2 cpu: a gang of three 1-cpu pods fits once. The PodGroup CRD is served
    # before the extender starts, for KubeRay's gangs (gang_declarations).
    pytest.mark.cluster(
        nodes=2, mode="extender", node_cpu=str(NODE_CPU), node_labels=POOL, gang_declarations=True
    ),
]

KUEUE = ("kueue.x-k8s.io", "v1beta2")
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_LABEL = "test.escher.io/job"  # on every pod of a test's job, Job or RayCluster
TRAINING = "training-operator"


def _kueue_objects() -> list[tuple[str, dict[str, Any]]]:
    """(plural, body) of the cluster-scoped objects a queue needs, in creation order."""
    kind = {"apiVersion": "/".join(KUEUE)}
    flavor = {**kind, "kind": "ResourceFlavor", "metadata": {"name": "pool"},
              "spec": {"nodeLabels": POOL}}  # fmt: skip
    quota = [{"name": "cpu", "nominalQuota": str(QUOTA_CPU)}]
    queue = {
        **kind,
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {"coveredResources": ["cpu"], "flavors": [{"name": "pool", "resources": quota}]}
            ],
        },
    }
    priorities = [
        {**kind, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}
        for name, value in (("low", 10), ("high", 1000))
    ]
    return [
        ("resourceflavors", flavor),
        ("clusterqueues", queue),
        *(("workloadpriorityclasses", p) for p in priorities),
    ]


class Kueue(OperatorGangs):
    """The test's hands on the cluster: queued Jobs and RayClusters, their Workloads and pods,
    the extender's /v1/gangs and ledger. Made once per module by the `kueue` fixture."""

    def __init__(self, info: localcluster.ClusterInfo) -> None:
        super().__init__(info)
        self.batch = client.BatchV1Api(self.api)
        self.operators: list[str] = []  # those started

    def selector(self, name: str) -> str:
        return f"{JOB_LABEL}={name}"

    def job(self, name: str, *, priority: str = "low") -> None:
        """A queued Job of MEMBERS pods of 1 cpu that must all run at once
        (parallelism = completions), declared a gang in its pod template."""
        labels = {JOB_LABEL: name, KEYS.gang: name}
        annotations = {KEYS.gang_min: str(MEMBERS)}
        container = {"name": "work", "image": "work", "resources": {"requests": {"cpu": "1"}}}
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "labels": {operators.QUEUE_LABEL: "lq", PRIORITY_LABEL: priority},
            },
            "spec": {
                "parallelism": MEMBERS,
                "completions": MEMBERS,
                "template": {
                    "metadata": {"labels": labels, "annotations": annotations},
                    "spec": {
                        "schedulerName": self.info.scheduler_name,
                        "restartPolicy": "Never",
                        "containers": [container],
                    },
                },
            },
        }
        self.batch.create_namespaced_job(NS, body)

    def ray(self, name: str) -> None:
        """A queued, gang-labelled RayCluster of a head and two workers of 1 cpu."""
        template = {
            "metadata": {"labels": {JOB_LABEL: name}},
            "spec": {"containers": [{"name": "ray", "image": "ray",
                                     "resources": {"requests": {"cpu": "1"}}}]},
        }  # fmt: skip
        workers = {"groupName": "workers", "replicas": MEMBERS - 1, "minReplicas": 0,
                   "maxReplicas": MEMBERS - 1, "rayStartParams": {},
                   "template": template}  # fmt: skip
        labels = {"ray.io/gang-scheduling-enabled": "true", operators.QUEUE_LABEL: "lq"}
        body = {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "headGroupSpec": {"rayStartParams": {}, "template": template},
                "workerGroupSpecs": [workers],
            },
        }
        self.custom.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", body)

    def delete_job(self, name: str) -> None:
        """Delete the Job (its pods with it); wait until every trace is gone."""
        self.batch.delete_namespaced_job(name, NS, propagation_policy="Background")
        self.released(name)
        self.ledger_matches_pods()

    def pytorch(self, name: str) -> None:
        """A queued PyTorchJob of a master and two workers of 1 cpu (its PodGroup, minMember
        3, made by the training operator, is the gang)."""
        container = {"name": "pytorch", "image": "pytorch",
                     "resources": {"requests": {"cpu": "1"}}}  # fmt: skip
        template = {"metadata": {"labels": {JOB_LABEL: name}},
                    "spec": {"containers": [container]}}  # fmt: skip

        def replicas(n: int) -> dict[str, Any]:
            return {"replicas": n, "restartPolicy": "OnFailure", "template": template}

        body = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": name, "labels": {operators.QUEUE_LABEL: "lq"}},
            "spec": {"pytorchReplicaSpecs": {"Master": replicas(1), "Worker": replicas(2)}},
        }
        self.custom.create_namespaced_custom_object("kubeflow.org", "v1", NS, "pytorchjobs", body)

    def delete_pytorch(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object("kubeflow.org", "v1", NS, "pytorchjobs", name)
        self.released(name)
        self.ledger_matches_pods()

    def delete_ray(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", name)
        self.released(name)
        self.ledger_matches_pods()

    def suspended(self, name: str) -> bool:
        return bool(self.batch.read_namespaced_job(name, NS).spec.suspend)

    def workload(self, owner: str) -> dict[str, Any]:
        """Kueue's Workload for the job `owner` (Job or RayCluster); empty until it exists."""
        items = self.custom.list_namespaced_custom_object(*KUEUE, NS, "workloads")["items"]
        owned = [w for w in items if owner in {o["name"] for o in w["metadata"]["ownerReferences"]}]
        return owned[0] if owned else {}

    def condition(self, owner: str, kind: str) -> dict[str, Any]:
        conditions = self.workload(owner).get("status", {}).get("conditions", [])
        return next((c for c in conditions if c["type"] == kind), {})

    def activate(self, owner: str, active: bool) -> None:
        """Set the Workload's spec.active, Kueue's documented way to stop and resume a job."""
        name = self.workload(owner)["metadata"]["name"]
        patch = {"spec": {"active": active}}
        self.custom.patch_namespaced_custom_object(*KUEUE, NS, "workloads", name, patch)

    def waits_in_kueue(self, name: str) -> str:
        """Wait until Kueue has tried the job and found no quota (the positive control), then
        check none of its pods exists. Returns Kueue's message."""
        verdict = until(
            lambda: (c := self.condition(name, "QuotaReserved")).get("status") == "False" and c,
            f"Kueue's verdict on {name}",
            timeout=90,
        )
        message: str = verdict["message"]
        assert "insufficient unused quota" in message, verdict
        assert not self.pods(name), self.nodes(name)
        assert not self.gang(name), self.gang(name)
        return message

    def live(self, name: str) -> dict[str, str | None]:
        """The job's pods not being deleted, and their nodes (None: not bound)."""
        return {
            p.metadata.name: p.spec.node_name
            for p in self.pods(name)
            if p.metadata.deletion_timestamp is None
        }

    def ledger_cpu(self) -> dict[str, int]:
        """Millicpu the extender's ledger holds on each node (bound pods and reservations)."""
        r = httpx.get(
            f"{self.info.extender_url}/v1/cluster-state",
            headers={"Authorization": f"Bearer {self.info.token}"},
        )
        r.raise_for_status()
        nodes = r.json()["nodes"]
        return {n: v["cpu"]["allocated"] for n, v in nodes.items() if v["cpu"]["allocated"]}

    def ledger_matches_pods(self) -> None:
        """Wait until the ledger holds exactly the cpu of the pods bound to each node: no
        reservation left, nothing of a deleted pod kept."""
        until(
            lambda: self.ledger_cpu() == self.used_cpu(),
            "the ledger holds just the bound pods' cpu",
        )


@pytest.fixture(scope="module")
def kueue_built() -> None:
    """Skips the module, before its cluster starts, when Kueue or KubeRay is not built."""
    if problems := operators.missing(["kuberay", "kueue"]):
        pytest.skip("; ".join(problems))


@pytest.fixture(scope="module")
def kueue(kueue_built: None, cluster: localcluster.ClusterInfo) -> Iterator[Kueue]:
    """Kueue, KubeRay and (when built) the training operator, started once for the module,
    a queue, and the test's hands."""
    names = ["kuberay", "kueue", *([] if operators.missing([TRAINING]) else [TRAINING])]
    # A generous start for a loaded machine.
    ops = operators.start(names, cluster, timeout=600)
    try:
        hands = Kueue(cluster)
        hands.operators = names
        for plural, body in _kueue_objects():
            hands.custom.create_cluster_custom_object(*KUEUE, plural, body)
        local = {"apiVersion": "/".join(KUEUE), "kind": "LocalQueue",
                 "metadata": {"name": "lq"}, "spec": {"clusterQueue": "cq"}}  # fmt: skip
        hands.custom.create_namespaced_custom_object(*KUEUE, NS, "localqueues", local)
        yield hands
    finally:
        ops.stop()


def test_an_admitted_job_short_of_room_waits_whole_and_is_bound_whole_once_room_frees(
    kueue: Kueue,
) -> None:
    # Kueue counts quota, not the nodes' room: a pod outside Kueue takes 1.5 of a node's 2
    # cpu, so the admitted Job's three 1-cpu pods fit the quota but not the nodes now.
    blocker = pod("blocker", requests={"cpu": "1500m"}, schedulerName=kueue.info.scheduler_name)
    kueue.core.create_namespaced_pod(NS, blocker)
    until(lambda: kueue.core.read_namespaced_pod("blocker", NS).spec.node_name, "blocker bound")
    why = kueue.waiting_whole(lambda: kueue.job("short"), "short", MEMBERS, "does not fit now")
    assert kueue.condition("short", "Admitted").get("status") == "True"
    assert kueue.suspended("short") is False
    kueue.core.delete_namespaced_pod("blocker", NS, grace_period_seconds=0)
    placed = until(lambda: kueue.bound_whole("short", MEMBERS), "short bound whole", timeout=60)
    gang = kueue.gang("short")
    assert gang["phase"] == "bound" and gang["min_members"] == MEMBERS, (gang, why)
    # Kueue's flavor put its node label in the pods' selector; the plan honoured it.
    assert all(p.spec.node_selector == POOL for p in kueue.pods("short"))
    assert len(placed) == MEMBERS
    kueue.no_node_over(NODE_CPU)
    kueue.delete_job("short")


def test_a_job_over_quota_waits_in_kueue_with_no_pod_and_is_bound_whole_once_quota_frees(
    kueue: Kueue,
) -> None:
    kueue.job("first")
    until(lambda: kueue.bound_whole("first", MEMBERS), "first bound whole", timeout=60)
    kueue.job("second")
    message = kueue.waits_in_kueue("second")
    assert kueue.suspended("second"), message
    kueue.delete_job("first")
    until(lambda: kueue.bound_whole("second", MEMBERS), "second bound whole", timeout=60)
    assert kueue.gang("second")["phase"] == "bound"
    kueue.delete_job("second")


def test_a_preempted_job_is_suspended_whole_and_the_extender_releases_all_it_held(
    kueue: Kueue,
) -> None:
    kueue.job("low", priority="low")
    until(lambda: kueue.bound_whole("low", MEMBERS), "low bound whole", timeout=60)
    kueue.job("high", priority="high")
    placed = until(lambda: kueue.bound_whole("high", MEMBERS), "high bound whole", timeout=90)
    # Kueue evicted the lower priority to admit the higher: suspended, requeued, no pod left.
    evicted = kueue.condition("low", "Evicted")
    assert evicted.get("reason") == "Preempted", evicted
    assert kueue.suspended("low")
    until(lambda: not kueue.pods("low"), "low's pods deleted")
    # The extender let go of the evicted gang: no entry, no reservation, only the pods bound.
    assert not kueue.gang("low")
    assert kueue.gang("high")["phase"] == "bound" and len(placed) == MEMBERS
    kueue.ledger_matches_pods()
    kueue.waits_in_kueue("low")
    kueue.delete_job("high")
    until(lambda: kueue.bound_whole("low", MEMBERS), "low readmitted and bound whole", timeout=90)
    kueue.delete_job("low")


def test_a_job_deactivated_and_reactivated_is_released_then_placed_again_whole(
    kueue: Kueue,
) -> None:
    kueue.job("again")
    first = until(lambda: kueue.bound_whole("again", MEMBERS), "again bound whole", timeout=60)
    kueue.activate("again", False)
    until(lambda: kueue.suspended("again"), "Kueue suspends the deactivated job")
    kueue.released("again")
    kueue.ledger_matches_pods()
    assert kueue.condition("again", "Evicted").get("reason") == "Deactivated"
    kueue.activate("again", True)
    second = until(lambda: kueue.bound_whole("again", MEMBERS), "bound whole again", timeout=60)
    assert not set(first) & set(second)  # new pods, the old ones gone
    assert kueue.gang("again")["phase"] == "bound"
    kueue.delete_job("again")


def test_a_job_flapped_between_suspended_and_resumed_is_never_left_in_part(
    kueue: Kueue,
) -> None:
    """Kueue told to stop and resume a job over and over, each flip taken by Kueue (the
    Job's suspend follows) before the next: pods are created and deleted mid-plan, mid-bind.
    Stated behaviour: a stop deletes every pod, and the extender drops the gang and all it
    holds; a start makes a new gang, placed whole. No node is over its cpu at any time."""
    kueue.job("flap")
    until(lambda: kueue.live("flap"), "flap's first pods")
    for active in (False, True) * 3 + (False,):
        kueue.activate("flap", active)
        until(lambda a=active: kueue.suspended("flap") is not a, f"Kueue follows active={active}")
        kueue.no_node_over(NODE_CPU)
    # Stopped last: nothing of it bound, held or listed.
    kueue.released("flap")
    kueue.ledger_matches_pods()
    kueue.activate("flap", True)
    placed = until(lambda: kueue.bound_whole("flap", MEMBERS), "flap bound whole", timeout=90)
    gang = kueue.gang("flap")
    assert gang["phase"] == "bound" and gang["timeouts"] == 0, gang
    assert {m["pod"] for m in gang["members"]} == {f"{NS}/{p}" for p in placed}
    kueue.no_node_over(NODE_CPU)
    kueue.ledger_matches_pods()
    kueue.delete_job("flap")


def test_a_raycluster_behind_kueue_is_admitted_and_bound_whole_and_one_over_quota_waits(
    kueue: Kueue,
) -> None:
    kueue.ray("ray-a")
    until(lambda: kueue.bound_whole("ray-a", MEMBERS), "ray-a bound whole", timeout=60)
    gang = kueue.gang("ray-a")  # KubeRay's PodGroup is the gang
    assert gang["phase"] == "bound" and gang["min_members"] == MEMBERS, gang
    kueue.ray("ray-b")
    kueue.waits_in_kueue("ray-b")
    kueue.delete_ray("ray-a")
    until(lambda: kueue.bound_whole("ray-b", MEMBERS), "ray-b bound whole", timeout=90)
    kueue.delete_ray("ray-b")


def test_a_pytorchjob_behind_kueue_is_admitted_and_bound_whole_and_one_over_quota_waits(
    kueue: Kueue,
) -> None:
    if TRAINING not in kueue.operators:
        pytest.skip("; ".join(operators.missing([TRAINING])))
    kueue.pytorch("pt-a")
    until(lambda: kueue.bound_whole("pt-a", MEMBERS), "pt-a bound whole", timeout=90)
    gang = kueue.gang("pt-a")  # the training operator's PodGroup is the gang
    assert gang["phase"] == "bound" and gang["min_members"] == MEMBERS, gang
    assert kueue.condition("pt-a", "Admitted").get("status") == "True"
    kueue.pytorch("pt-b")
    kueue.waits_in_kueue("pt-b")
    kueue.delete_pytorch("pt-a")
    until(lambda: kueue.bound_whole("pt-b", MEMBERS), "pt-b bound whole", timeout=90)
    assert kueue.gang("pt-b")["phase"] == "bound"
    kueue.delete_pytorch("pt-b")


def test_kueue_tas_through_the_kueue_tas_approach_binds_a_gang_inside_the_rack_it_requires(
    kueue: Kueue,
) -> None:
    """The kueue-tas approach's objects on this cluster's Kueue: its nodes labelled as racks
    of one node (so a gang that requires a rack has every member on one node), a node's
    half taken by a pod outside Kueue. Kueue's record (the Workload's topology request and
    its one-domain assignment) and the pods' nodes both say where TAS put the gang."""
    topology = Topology(rack_nodes=1, racks_per_block=2, blocks_per_zone=1)
    nodes = sorted(kueue.info.nodes)
    for i, node in enumerate(nodes):
        kueue.core.patch_node(node, {"metadata": {"labels": topology.labels(i)}})
    blocker = pod("tas-blocker", requests={"cpu": "1"}, node=nodes[0])
    kueue.core.create_namespaced_pod(NS, blocker)
    footing = Footing(nodes=len(nodes), node_cpu=str(NODE_CPU), node_memory="8Gi")
    objects = kueue_tas.queue_objects(footing)
    try:
        for plural, body in objects:
            if plural == "localqueues":
                kueue.custom.create_namespaced_custom_object(*KUEUE, NS, plural, body)
            else:
                kueue.custom.create_cluster_custom_object(*KUEUE, plural, body)
        arrival = GangArrival(0.0, "tas-gang", 2, "1", "100Mi", 30.0)
        job = GangJob(arrival, 60.0, 60.0, topology="required", level="rack")
        kueue.batch.create_namespaced_job(NS, kueue_tas.gang_job(job, kueue.info.scheduler_name))
        selector = "job-name=tas-gang"

        def bound() -> dict[str, str]:
            pods = kueue.core.list_namespaced_pod(NS, label_selector=selector).items
            whole = len(pods) == 2 and all(p.spec.node_name for p in pods)
            return {p.metadata.name: p.spec.node_name for p in pods} if whole else {}

        placed = until(bound, "the TAS gang bound", timeout=90)
        rack = "topology.kubernetes.io/rack"
        workload = kueue.workload("tas-gang")
        (podset,) = workload["spec"]["podSets"]
        assert podset["topologyRequest"]["required"] == rack, podset
        (assigned,) = workload["status"]["admission"]["podSetAssignments"]
        domains = assigned["topologyAssignment"]
        print("Kueue's topology assignment:", domains)
        assert [piece["domainCount"] for piece in domains["slices"]] == [1], domains
        # One rack: every member on the free node, none beside the blocker.
        assert set(placed.values()) == {nodes[1]}, placed
        kueue.no_node_over(NODE_CPU)
        kueue.batch.delete_namespaced_job("tas-gang", NS, propagation_policy="Background")
        until(lambda: not bound() and not kueue.core.list_namespaced_pod(
            NS, label_selector=selector).items, "the TAS gang's pods deleted")  # fmt: skip
    finally:
        kueue.core.delete_namespaced_pod("tas-blocker", NS, grace_period_seconds=0)
        for plural, _ in reversed(objects):
            with contextlib.suppress(client.ApiException):
                if plural == "localqueues":
                    kueue.custom.delete_namespaced_custom_object(*KUEUE, NS, plural, "tas")
                else:
                    kueue.custom.delete_cluster_custom_object(*KUEUE, plural, "tas")
        unlabel = {"metadata": {"labels": dict.fromkeys(topology.labels(0))}}
        for node in nodes:
            kueue.core.patch_node(node, unlabel)
    kueue.ledger_matches_pods()
