"""KubeRay's gangs placed all or nothing by the extender, on the real control plane (issue 60).

The real KubeRay operator (`make operators`), unchanged, with its documented
`--batch-scheduler=scheduler-plugins`: a RayCluster labelled ray.io/gang-scheduling-enabled
gets a scheduler-plugins PodGroup of its name (minMember: workers + 1) and pods of the
schedulerName scheduler-plugins-scheduler with the PodGroup's label. The cluster runs the
extender as deploy/ ships it (mode extender, split scope): deploy/'s marker policy takes
KubeRay's name, marks the pods as gang members and moves them to the profile that asks the
extender, which reads the PodGroup as the gang. On kwok nodes:

- a RayCluster that fits is reserved as one gang and bound whole;
- one that does not fit beside another waits whole (each member tried, none bound) and is
  placed whole once the other is deleted, whose reservation and /v1/gangs entry go with it;
- one scaled up after it was bound (two workers to four) has its new workers placed as
  pods of a bound gang, and scaled down (to one) keeps the gang bound: the gang stays the
  PodGroup's minMember of its creation, nothing is reserved, no node over its cpu;
- one larger than the cluster waits whole with the reason, and is placed whole once a node
  is added.

docs/integrations.md says what is honoured and what is not. Skipped when KubeRay is not built.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from operator_gangs import NS, WAIT, OperatorGangs

from escher_harness import localcluster
from escher_harness.localcluster import operators
from escher_harness.localcluster.fakenodes import NodeShape, create_nodes
from escher_harness.waits import until

pytestmark = [
    pytest.mark.e2e,
    # Two nodes of 2 cpu: a RayCluster of three 1-cpu pods fits once, not twice. The
    # PodGroup CRD is served before the extender starts (gang_declarations), as a user
    # installs KubeRay's before the extender (docs/integrations.md).
    pytest.mark.cluster(nodes=2, mode="extender", node_cpu="2", gang_declarations=True),
]

GANG_LABEL = "ray.io/gang-scheduling-enabled"
MEMBERS = 3  # a head and two workers


class Ray(OperatorGangs):
    """The test's hands on the cluster: RayClusters through KubeRay, their pods, and the
    extender's GET /v1/gangs (operator_gangs). Made once per module by the `ray` fixture."""

    def selector(self, name: str) -> str:
        return f"ray.io/cluster={name}"

    def create(self, name: str, cpu: str, most: int = MEMBERS - 1) -> None:
        """A gang-labelled RayCluster of a head and two workers, each requesting `cpu`, its
        worker group allowed up to `most` workers."""

        def template() -> dict[str, Any]:
            container = {"name": "ray", "image": "ray", "resources": {"requests": {"cpu": cpu}}}
            return {"spec": {"containers": [container]}}

        workers = MEMBERS - 1
        group = {"groupName": "workers", "replicas": workers, "minReplicas": 0,
                 "maxReplicas": most, "rayStartParams": {}, "template": template()}  # fmt: skip
        body = {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": name, "labels": {GANG_LABEL: "true"}},
            "spec": {
                "headGroupSpec": {"rayStartParams": {}, "template": template()},
                "workerGroupSpecs": [group],
            },
        }
        self.custom.create_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", body)

    def delete(self, name: str) -> None:
        """Delete the RayCluster; wait until its pods are gone and the extender lists no
        gang of its name (every reservation released)."""
        self.custom.delete_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", name)
        self.released(name)

    def scale(self, name: str, workers: int) -> None:
        """Set the worker group's replicas, as a user or the Ray autoscaler does."""
        where = ("ray.io", "v1", NS, "rayclusters", name)

        def replaced() -> bool:
            body = self.custom.get_namespaced_custom_object(*where)
            body["spec"]["workerGroupSpecs"][0]["replicas"] = workers
            try:
                self.custom.replace_namespaced_custom_object(*where, body)
            except ApiException as e:
                if e.status != 409:  # KubeRay wrote it meanwhile: read it again
                    raise
                return False
            return True

        until(replaced, f"{name} scaled to {workers} workers")

    def podgroup_min(self, name: str) -> int:
        pg = self.custom.get_namespaced_custom_object(
            "scheduling.x-k8s.io", "v1alpha1", NS, "podgroups", name
        )
        return int(pg["spec"]["minMember"])

    def create_waiting(self, name: str, cpu: str, reason: str) -> str:
        """Create the RayCluster and wait until it waits whole (OperatorGangs.waiting_whole)."""
        return self.waiting_whole(lambda: self.create(name, cpu), name, MEMBERS, reason)


@pytest.fixture(scope="module")
def kuberay_built() -> None:
    """Skips the module, before its cluster starts, when KubeRay is not built."""
    if problems := operators.missing(["kuberay"]):
        pytest.skip("; ".join(problems))


@pytest.fixture(scope="module")
def ray(kuberay_built: None, cluster: localcluster.ClusterInfo) -> Iterator[Ray]:
    """KubeRay, started once for the module beside the cluster, and the test's hands."""
    ops = operators.start(["kuberay"], cluster, timeout=600)  # generous, for a loaded machine
    try:
        yield Ray(cluster)
    finally:
        ops.stop()


def test_a_gang_labelled_raycluster_is_reserved_as_one_gang_and_bound_whole(ray: Ray) -> None:
    start = time.monotonic()
    ray.create("whole", cpu="1")
    placed = until(lambda: ray.bound_whole("whole", MEMBERS), "whole's 3 pods bound", timeout=60)
    print(f"RayCluster of {MEMBERS} bound whole {time.monotonic() - start:.1f} s after creation")
    # The marker policy took KubeRay's name: every pod on the profile that asks the extender.
    all_nodes = f"{ray.info.scheduler_name}-all-nodes"
    assert {p.spec.scheduler_name for p in ray.pods("whole")} == {all_nodes}
    gang = ray.gang("whole")
    # The PodGroup's minMember is the gang's minimum; the whole gang reserved, no
    # reservation timed out, each member bound where it was reserved. (Not one reservation
    # always: a place kube-scheduler's own filters refuse is moved, which reserves again.)
    assert gang["phase"] == "bound" and gang["min_members"] == MEMBERS, gang
    assert {m["pod"]: m["node"] for m in gang["members"]} == {
        f"{NS}/{pod}": node for pod, node in placed.items()
    }
    assert {m["state"] for m in gang["members"]} == {"bound"}
    assert gang["reservations"] >= 1 and gang["timeouts"] == 0, gang
    ray.delete("whole")


def test_a_raycluster_short_of_room_waits_whole_and_takes_what_a_deleted_one_releases(
    ray: Ray,
) -> None:
    ray.create("first", cpu="1")
    until(lambda: ray.bound_whole("first", MEMBERS), "first bound whole", timeout=60)
    # 3 of the 4 cpu are taken: the second fits the cluster, not its free room.
    ray.create_waiting("second", cpu="1", reason="does not fit now")
    start = time.monotonic()
    ray.delete("first")
    placed = until(lambda: ray.bound_whole("second", MEMBERS), "second bound whole", timeout=60)
    print(f"waiting RayCluster bound whole {time.monotonic() - start:.1f} s after the deletion")
    assert ray.gang("second")["phase"] == "bound"
    assert len(placed) == MEMBERS
    ray.delete("second")


def test_a_raycluster_scaled_up_and_down_after_it_was_bound_keeps_its_gang_of_creation(
    ray: Ray,
) -> None:
    """What "the gang" of a scaled RayCluster is, measured (docs/integrations.md): the
    PodGroup's minMember at creation. Half-cpu pods: four workers and the head fit twice over,
    so only a gang held back could keep a new worker from its node."""
    ray.create("scaled", cpu="500m", most=4)
    until(lambda: ray.bound_whole("scaled", MEMBERS), "scaled bound whole", timeout=60)
    for workers in (4, 1):
        ray.scale("scaled", workers)
        placed = until(
            lambda w=workers: ray.bound_whole("scaled", w + 1),
            f"{workers} workers bound",
            timeout=WAIT,
        )
        gang = ray.gang("scaled")
        print(f"scaled to {workers} workers: gang {gang['phase']}, min {gang['min_members']}, "
              f"{len(gang['members'])} members listed, PodGroup minMember "
              f"{ray.podgroup_min('scaled')}")  # fmt: skip
        # KubeRay never rewrites the PodGroup, so the gang stays the one created, bound.
        assert ray.podgroup_min("scaled") == MEMBERS
        assert gang["phase"] == "bound" and gang["min_members"] == MEMBERS, gang
        assert gang["timeouts"] == 0 and len(placed) == workers + 1, gang
        until(lambda: ray.reservations() == 0, "no reservation held for the scaled gang")
        ray.no_node_over(2)
    ray.delete("scaled")


def test_a_raycluster_larger_than_the_cluster_waits_whole_until_a_node_lets_it_fit(
    ray: Ray,
) -> None:
    # Three pods of 2 cpu on two nodes of 2 cpu.
    ray.create_waiting("big", cpu="2", reason="can never fit")
    start = time.monotonic()
    create_nodes(ray.api, ["node-added"], NodeShape(cpu="2", memory="8Gi"))
    placed = until(lambda: ray.bound_whole("big", MEMBERS), "big bound whole", timeout=60)
    print(f"RayCluster bound whole {time.monotonic() - start:.1f} s after a node was added")
    assert len(set(placed.values())) == MEMBERS  # one pod of 2 cpu per node
    ray.delete("big")
