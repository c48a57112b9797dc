"""Kubeflow training operator's PyTorchJobs placed all or nothing by the extender, on the real
control plane (issue 60).

The real training operator v1.8.1 (`make operators`), unchanged, with its documented gang
configuration `--gang-scheduler-name=scheduler-plugins-scheduler` (any name but volcano means
scheduler-plugins): each PyTorchJob gets a scheduler-plugins PodGroup of its name (minMember:
every replica, or runPolicy.schedulingPolicy.minAvailable) and pods of that schedulerName with
the PodGroup's label. The cluster runs the extender as deploy/ ships it (mode extender, split
scope, deploy/'s marker policy), on four kwok nodes of 2 cpu in two racks. A job:

- that fits is reserved as one gang and bound whole; deleting it releases every place;
- that does not fit beside another waits whole and is bound whole once the other is deleted;
- that requires a rack (the extender's annotation on its pod templates) is bound in one, and
  a worker deleted mid-run, recreated by the operator, is placed in that rack again.

And the bad input of issue 60, each with a stated behaviour (docs/integrations.md):

- a PodGroup that disagrees with the members' annotation: every member refused, the reason
  naming both sides on each pod, nothing reserved or bound;
- a minimum above the pods that will ever exist: the gang waits saying how many are
  missing, its reservation is released at its timeout, nothing bound;
- the PodGroup deleted while its pods wait (the operator down, so it stays deleted): the pods
  wait for it, saying so; the restarted operator creates it again and the gang is planned
  under it;
- the operator killed and restarted in the middle of a gang's bind burst: the gang is bound
  whole, with the pods it had (none created twice), each where it was reserved.

No node is ever over its cpu. Skipped when the training operator is not built.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from operator_gangs import NS, WAIT, OperatorGangs

from escher_harness import localcluster
from escher_harness.localcluster import operators
from escher_harness.localcluster.fakenodes import Topology
from escher_harness.waits import until

# Four nodes of 2 cpu, racks of two (rack-000: node-0, node-1; rack-001: node-2, node-3).
TOPOLOGY = Topology(rack_nodes=2, racks_per_block=2, blocks_per_zone=1)
NODE_CPU = 2
pytestmark = [
    pytest.mark.e2e,
    # The PodGroup CRD is served before the extender starts (gang_declarations).
    pytest.mark.cluster(
        nodes=4,
        mode="extender",
        node_cpu=str(NODE_CPU),
        node_topology=TOPOLOGY,
        gang_declarations=True,
        timeout=300,  # start-up, generous for a loaded machine
    ),
]
OPERATOR = "training-operator"
REQUIRED = "escher.io/gang-required-topology"
GANG_MIN = "escher.io/gang-min"


class Training(OperatorGangs):
    """The test's hands: PyTorchJobs through the training operator, their pods, /v1/gangs."""

    def __init__(self, info: localcluster.ClusterInfo, ops: operators.Operators) -> None:
        super().__init__(info)
        self.ops = ops

    def selector(self, name: str) -> str:
        return f"training.kubeflow.org/job-name={name}"

    def create(
        self,
        name: str,
        workers: int,
        cpu: str,
        annotations: dict[str, str] | None = None,
        scheduling: dict[str, int] | None = None,
    ) -> None:
        """A PyTorchJob of a master and `workers` workers, each requesting `cpu`, their pod
        templates annotated with `annotations`; `scheduling` its runPolicy.schedulingPolicy."""

        def replicas(n: int) -> dict[str, Any]:
            container = {"name": "pytorch", "image": "pytorch",
                         "resources": {"requests": {"cpu": cpu}}}  # fmt: skip
            template = {"metadata": {"annotations": annotations or {}},
                        "spec": {"containers": [container]}}  # fmt: skip
            return {"replicas": n, "restartPolicy": "OnFailure", "template": template}

        spec: dict[str, Any] = {"pytorchReplicaSpecs": {"Master": replicas(1)}}
        if workers:
            spec["pytorchReplicaSpecs"]["Worker"] = replicas(workers)
        if scheduling:
            spec["runPolicy"] = {"schedulingPolicy": scheduling}
        body = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                "metadata": {"name": name}, "spec": spec}  # fmt: skip
        self.custom.create_namespaced_custom_object("kubeflow.org", "v1", NS, "pytorchjobs", body)

    def delete(self, name: str) -> None:
        """Delete the job; wait until its pods are gone and its gang with them."""
        self.custom.delete_namespaced_custom_object("kubeflow.org", "v1", NS, "pytorchjobs", name)
        self.released(name)

    def podgroup(self, name: str) -> dict[str, Any] | None:
        try:
            pg: dict[str, Any] = self.custom.get_namespaced_custom_object(
                "scheduling.x-k8s.io", "v1alpha1", NS, "podgroups", name
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return pg

    def rack(self, node: str) -> str:
        return TOPOLOGY.domains(sorted(self.info.nodes).index(node))["rack"]


@pytest.fixture(scope="module")
def training_built() -> None:
    """Skips the module, before its cluster starts, when the operator is not built."""
    if problems := operators.missing([OPERATOR]):
        pytest.skip("; ".join(problems))


@pytest.fixture(scope="module")
def jobs(training_built: None, cluster: localcluster.ClusterInfo) -> Iterator[Training]:
    """The training operator, started once for the module beside the cluster."""
    ops = operators.start([OPERATOR], cluster, timeout=240)
    try:
        yield Training(cluster, ops)
    finally:
        ops.stop()


@pytest.fixture(autouse=True)
def never_over(jobs: Training) -> Iterator[None]:
    """After every test: no node holds more cpu than it has, and no reservation is left."""
    yield
    jobs.no_node_over(NODE_CPU)
    until(lambda: jobs.reservations() == 0, "no reservation left in the extender's ledger")


def test_a_pytorchjob_is_reserved_as_one_gang_bound_whole_and_released_on_deletion(
    jobs: Training,
) -> None:
    jobs.create("whole", workers=3, cpu="1")
    placed = until(lambda: jobs.bound_whole("whole", 4), "whole's 4 pods bound", timeout=WAIT)
    all_nodes = f"{jobs.info.scheduler_name}-all-nodes"  # moved there by the marker policy
    assert {p.spec.scheduler_name for p in jobs.pods("whole")} == {all_nodes}
    gang = jobs.gang("whole")
    # The PodGroup's minMember (every replica) is the gang's minimum.
    assert gang["phase"] == "bound" and gang["min_members"] == 4, gang
    assert {m["pod"]: m["node"] for m in gang["members"]} == {
        f"{NS}/{pod}": node for pod, node in placed.items()
    }
    assert gang["timeouts"] == 0, gang
    jobs.delete("whole")


def test_a_pytorchjob_short_of_room_waits_whole_and_starts_when_room_appears(
    jobs: Training,
) -> None:
    jobs.create("first", workers=2, cpu="2")  # 6 of the 8 cpu
    until(lambda: jobs.bound_whole("first", 3), "first bound whole", timeout=WAIT)
    # 3 cpu in 1-cpu pods: fits the cluster, not the one free node.
    jobs.waiting_whole(lambda: jobs.create("second", 2, "1"), "second", 3, "does not fit now")
    jobs.delete("first")
    until(lambda: jobs.bound_whole("second", 3), "second bound whole", timeout=WAIT)
    assert jobs.gang("second")["phase"] == "bound"
    jobs.delete("second")


def test_a_worker_deleted_mid_run_is_placed_again_in_the_rack_the_gang_required(
    jobs: Training,
) -> None:
    jobs.create("racked", workers=2, cpu="1", annotations={REQUIRED: "rack"})
    placed = until(lambda: jobs.bound_whole("racked", 3), "racked bound whole", timeout=WAIT)
    (rack,) = {jobs.rack(n) for n in placed.values()}
    # Three pods of 1 cpu on the rack's two nodes: delete a worker from the full node, so
    # both of the rack's nodes are half used and the other rack's empty ones score higher
    # for kube-scheduler (least allocated, spread): only the extender keeps it in the rack.
    full = next(n for n in placed.values() if list(placed.values()).count(n) == 2)
    worker = next(p for p, n in placed.items() if n == full and "-worker-" in p)
    old = next(p.metadata.uid for p in jobs.pods("racked") if p.metadata.name == worker)
    jobs.core.delete_namespaced_pod(worker, NS, grace_period_seconds=0)

    def replaced() -> str | None:
        pod = next((p for p in jobs.pods("racked") if p.metadata.name == worker), None)
        fresh = pod is not None and pod.metadata.uid != old
        return pod.spec.node_name if fresh and pod is not None else None

    node = until(replaced, f"{worker} recreated by the operator and bound", timeout=WAIT)
    assert jobs.rack(node) == rack, (node, rack)
    jobs.delete("racked")


def test_a_podgroup_that_disagrees_with_the_members_annotation_refuses_them_all(
    jobs: Training,
) -> None:
    # minMember 3 (every replica) against escher.io/gang-min 2 on every pod.
    jobs.create("split", workers=2, cpu="1", annotations={GANG_MIN: "2"})

    def refused() -> list[str]:
        messages = []
        for p in jobs.pods("split"):
            cond = next((c for c in p.status.conditions or [] if c.type == "PodScheduled"), None)
            messages.append(cond.message if cond is not None and cond.message else "")
        return messages if len(messages) == 3 and all("conflict" in m for m in messages) else []

    messages = until(refused, "every member refused with the conflict", timeout=WAIT)
    assert all(GANG_MIN in m and "minMember" in m for m in messages), messages
    assert not any(jobs.nodes("split").values())
    jobs.delete("split")


def test_a_minimum_above_the_pods_that_will_ever_exist_waits_and_lets_its_places_go(
    jobs: Training,
) -> None:
    # minAvailable 5 for 3 pods; a 2 s timeout so that its reservation is seen released.
    policy = {"minAvailable": 5, "scheduleTimeoutSeconds": 2}
    jobs.create("short", workers=2, cpu="1", scheduling=policy)
    until(
        lambda: "waiting for 2 more member(s)" in jobs.gang("short").get("reason", ""),
        "short's reason in /v1/gangs",
        timeout=WAIT,
    )
    until(lambda: jobs.gang("short")["timeouts"] >= 1, "short's reservation released", timeout=WAIT)
    assert len(jobs.nodes("short")) == 3 and not any(jobs.nodes("short").values())
    jobs.delete("short")


def test_a_podgroup_deleted_while_its_pods_wait_is_waited_for_until_the_operator_makes_it(
    jobs: Training,
) -> None:
    # Five pods of 2 cpu on 8 cpu: waits whole for ever.
    jobs.waiting_whole(lambda: jobs.create("lost", 4, "2"), "lost", 5, "can never fit")
    jobs.ops.kill(OPERATOR)  # so that nobody makes the PodGroup again at once
    try:
        jobs.custom.delete_namespaced_custom_object(
            "scheduling.x-k8s.io", "v1alpha1", NS, "podgroups", "lost"
        )
        until(lambda: not jobs.gang("lost"), "lost's gang forgotten with its declaration")
        pod = jobs.pods("lost")[0].metadata.name
        waiting = "podgroups.scheduling.x-k8s.io default/lost, which does not exist (yet)"

        def said() -> bool:
            pods = jobs.core.list_namespaced_pod(NS, field_selector=f"metadata.name={pod}").items
            conds = pods[0].status.conditions or []
            return any(c.type == "PodScheduled" and waiting in (c.message or "") for c in conds)

        # kube-scheduler asks again at its next retry of the pods: any cluster event (a
        # node's label here), else within 5 minutes.
        nudge = {"metadata": {"labels": {"escher.io/test-nudge": "lost"}}}
        jobs.core.patch_node(sorted(jobs.info.nodes)[0], nudge)
        until(said, f"{pod} says it waits for its PodGroup", timeout=WAIT)
        assert jobs.reservations() == 0 and not any(jobs.nodes("lost").values())
    finally:
        jobs.ops.revive(OPERATOR)
    until(lambda: jobs.podgroup("lost"), "the operator made the PodGroup again", timeout=WAIT)
    # Learnt again under it (planned at its members' next try), still nothing bound.
    gang = until(lambda: jobs.gang("lost"), "lost's gang back in /v1/gangs", timeout=WAIT)
    assert gang["min_members"] == 5 and gang["phase"] == "waiting", gang
    assert not any(jobs.nodes("lost").values())
    jobs.delete("lost")


def test_the_operator_killed_in_a_gangs_bind_burst_leaves_it_bound_whole(
    jobs: Training,
) -> None:
    jobs.create("burst", workers=3, cpu="1")
    # Killed once the gang is reserved: its members are passing to their places and binding.
    until(
        lambda: jobs.gang("burst").get("phase") in ("reserved", "bound"),
        "burst reserved",
        timeout=WAIT,
    )
    jobs.ops.kill(OPERATOR)
    before = {p.metadata.name: p.metadata.uid for p in jobs.pods("burst")}
    jobs.ops.revive(OPERATOR)
    placed = until(lambda: jobs.bound_whole("burst", 4), "burst bound whole", timeout=WAIT)
    # The restarted operator adopted the pods it had made (and made any it had not yet):
    # none created twice or again.
    after = {p.metadata.name: p.metadata.uid for p in jobs.pods("burst")}
    assert len(after) == 4 and {p: after.get(p) for p in before} == before, (before, after)
    gang = jobs.gang("burst")
    assert gang["phase"] == "bound" and gang["timeouts"] == 0, gang
    assert {m["pod"]: m["node"] for m in gang["members"]} == {
        f"{NS}/{p}": n for p, n in placed.items()
    }
    jobs.delete("burst")
