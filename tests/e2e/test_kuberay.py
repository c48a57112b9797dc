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
- one larger than the cluster waits whole with the reason, and is placed whole once a node
  is added.

docs/integrations.md says what is honoured and what is not. Skipped when KubeRay is not built.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kubernetes import client

from escher_harness import localcluster
from escher_harness.kubeclient import api_client
from escher_harness.localcluster import operators
from escher_harness.localcluster.fakenodes import NodeShape, create_nodes
from escher_harness.waits import scheduling_attempts, until

pytestmark = [
    pytest.mark.e2e,
    # Two nodes of 2 cpu: a RayCluster of three 1-cpu pods fits once, not twice. The
    # PodGroup CRD is served before the extender starts (gang_declarations), as a user
    # installs KubeRay's before the extender (docs/integrations.md).
    pytest.mark.cluster(nodes=2, mode="extender", node_cpu="2", gang_declarations=True),
]

NS = "default"
GANG_LABEL = "ray.io/gang-scheduling-enabled"
MEMBERS = 3  # a head and two workers


class Ray:
    """The test's hands on the cluster: RayClusters through KubeRay, their pods, and the
    extender's GET /v1/gangs. Made once per module by the `ray` fixture."""

    def __init__(self, info: localcluster.ClusterInfo) -> None:
        self.info = info
        self.api = api_client(info.kubeconfig)
        self.core, self.custom = client.CoreV1Api(self.api), client.CustomObjectsApi(self.api)

    def create(self, name: str, cpu: str) -> None:
        """A gang-labelled RayCluster of a head and two workers, each requesting `cpu`."""

        def template() -> dict[str, Any]:
            container = {"name": "ray", "image": "ray", "resources": {"requests": {"cpu": cpu}}}
            return {"spec": {"containers": [container]}}

        workers = MEMBERS - 1
        group = {"groupName": "workers", "replicas": workers, "minReplicas": workers,
                 "maxReplicas": workers, "rayStartParams": {}, "template": template()}  # fmt: skip
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
        until(lambda: not self.pods(name), f"{name}'s pods deleted with it")
        until(lambda: not self.gang(name), f"{name} gone from /v1/gangs")

    def pods(self, name: str) -> list[client.V1Pod]:
        return list(
            self.core.list_namespaced_pod(NS, label_selector=f"ray.io/cluster={name}").items
        )

    def nodes(self, name: str) -> dict[str, str | None]:
        """Each of the RayCluster's pods and the node it is bound to (None: not bound)."""
        return {p.metadata.name: p.spec.node_name for p in self.pods(name)}

    def bound_whole(self, name: str) -> dict[str, str]:
        """The pods' nodes once all of them exist and are bound; empty until then."""
        nodes = self.nodes(name)
        whole = len(nodes) == MEMBERS and all(nodes.values())
        return {p: n for p, n in nodes.items() if n} if whole else {}

    def gang(self, name: str) -> dict[str, Any]:
        """The extender's GET /v1/gangs entry for the RayCluster's gang; empty if none."""
        r = httpx.get(
            f"{self.info.extender_url}/v1/gangs",
            headers={"Authorization": f"Bearer {self.info.token}"},
        )
        r.raise_for_status()
        return next((g for g in r.json() if g["gang"] == f"{NS}/{name}"), {})

    def create_waiting(self, name: str, cpu: str, reason: str) -> str:
        """Create the RayCluster; wait until its gang waits with `reason` in /v1/gangs and
        kube-scheduler has tried each of its members (the positive control), then check that
        none of them is bound. Returns the reason in full."""
        tried = scheduling_attempts(self.info, "unschedulable")
        self.create(name, cpu)
        why: str = until(
            lambda: reason in (r := self.gang(name).get("reason", "")) and r,
            f"{name}'s reason in /v1/gangs",
        )
        until(
            lambda: scheduling_attempts(self.info, "unschedulable") >= tried + MEMBERS,
            f"kube-scheduler tried each of {name}'s members",
        )
        nodes = self.nodes(name)
        assert len(nodes) == MEMBERS and not any(nodes.values()), nodes
        assert self.gang(name)["phase"] == "waiting"
        return why


@pytest.fixture(scope="module")
def kuberay_built() -> None:
    """Skips the module, before its cluster starts, when KubeRay is not built."""
    if problems := operators.missing(["kuberay"]):
        pytest.skip("; ".join(problems))


@pytest.fixture(scope="module")
def ray(kuberay_built: None, cluster: localcluster.ClusterInfo) -> Iterator[Ray]:
    """KubeRay, started once for the module beside the cluster, and the test's hands."""
    ops = operators.start(["kuberay"], cluster)
    try:
        yield Ray(cluster)
    finally:
        ops.stop()


def test_a_gang_labelled_raycluster_is_reserved_as_one_gang_and_bound_whole(ray: Ray) -> None:
    start = time.monotonic()
    ray.create("whole", cpu="1")
    placed = until(lambda: ray.bound_whole("whole"), "whole's 3 pods bound", timeout=60)
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
    until(lambda: ray.bound_whole("first"), "first bound whole", timeout=60)
    # 3 of the 4 cpu are taken: the second fits the cluster, not its free room.
    ray.create_waiting("second", cpu="1", reason="does not fit now")
    start = time.monotonic()
    ray.delete("first")
    placed = until(lambda: ray.bound_whole("second"), "second bound whole", timeout=60)
    print(f"waiting RayCluster bound whole {time.monotonic() - start:.1f} s after the deletion")
    assert ray.gang("second")["phase"] == "bound"
    assert len(placed) == MEMBERS
    ray.delete("second")


def test_a_raycluster_larger_than_the_cluster_waits_whole_until_a_node_lets_it_fit(
    ray: Ray,
) -> None:
    # Three pods of 2 cpu on two nodes of 2 cpu.
    ray.create_waiting("big", cpu="2", reason="can never fit")
    start = time.monotonic()
    create_nodes(ray.api, ["node-added"], NodeShape(cpu="2", memory="8Gi"))
    placed = until(lambda: ray.bound_whole("big"), "big bound whole", timeout=60)
    print(f"RayCluster bound whole {time.monotonic() - start:.1f} s after a node was added")
    assert len(set(placed.values())) == MEMBERS  # one pod of 2 cpu per node
    ray.delete("big")
