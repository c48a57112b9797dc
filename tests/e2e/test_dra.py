"""Mode dra on the real control plane: ephemeral resources as DRA devices (Kubernetes 1.37's
DRA-backed extended resources), allocated by an unmodified kube-scheduler.

The service publishes each node's capacity as a pool of devices in ResourceSlices and a
DeviceClass mapping `escher.io/<name>`; pods request `escher.io/<name>` as in every mode,
kube-scheduler's DynamicResources plugin allocates a device per unit in a ResourceClaim it
creates, and the garbage collector (kube-controller-manager runs in this mode) deletes the
claim with its pod, which frees the unit. Here: pods get units up to the capacity and the
rest wait, and are placed once a unit is freed; get_cluster_state counts the allocations,
which are the claims (a claim a pod names directly counts too, and a decrease below it is
refused); a capacity larger than one slice works; a decrease below what pods hold is
refused, one above keeps every held device; what slices cannot hold and another writer's
DeviceClass are refused, changing nothing. The restart (tests/e2e/test_restart.py) and the ESLs
(tests/e2e/esl, approach dra) run in this mode too.
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from escher_harness import localcluster
from escher_harness.capacity_history import PodHistory, Step, fence, over_commits
from escher_harness.kubeclient import api_client
from escher_harness.waits import until
from escher_harness.workload import Workload, pod_manifest
from extender.esl.client import PolicyAPIError, PolicyClient

pytestmark = [pytest.mark.e2e, pytest.mark.cluster(nodes=3, node_cpu="8", mode="dra")]

_names = itertools.count()


def policy(info: localcluster.ClusterInfo) -> PolicyClient:
    assert info.extender_url is not None and info.token is not None
    return PolicyClient(info.extender_url, info.token)


def held_devices(info: localcluster.ClusterInfo, group: str) -> set[str]:
    """The devices of a node's resource (pools `group/<i>`) that claims hold."""
    dra = client.ResourceV1Api(api_client(info.kubeconfig))
    return {
        r.device
        for c in dra.list_resource_claim_for_all_namespaces().items
        if c.status is not None and c.status.allocation is not None
        for r in c.status.allocation.devices.results or []
        if r.pool.startswith(group + "/")
    }


def published_devices(
    info: localcluster.ClusterInfo, group: str, tainted_only: bool = False
) -> set[str]:
    """The published devices of a node's resource (`tainted_only`: those with a NoSchedule
    taint, which take no new allocation)."""
    dra = client.ResourceV1Api(api_client(info.kubeconfig))
    return {
        d.name
        for s in dra.list_resource_slice().items
        if s.spec.pool.name.startswith(group + "/")
        for d in s.spec.devices or []
        if not tainted_only or any(t.effect == "NoSchedule" for t in d.taints or [])
    }


def allocated(info: localcluster.ClusterInfo, node: str, resource: str) -> tuple[int, int]:
    with policy(info) as p:
        usage = p.cluster_state().nodes[node].get(resource)
    return (usage.capacity, usage.allocated) if usage is not None else (0, 0)


def wait_for(check: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_pods_get_units_up_to_the_capacity_and_the_rest_wait_for_a_freed_one(
    cluster: localcluster.ClusterInfo,
) -> None:
    work = Workload(api_client(cluster.kubeconfig))
    n = next(_names)
    node = cluster.nodes[0]
    with policy(cluster) as p:
        result = p.set_resource(f"slot{n}", 2, node=node)
    assert result.durable
    resource = result.resource
    cls = client.ResourceV1Api(api_client(cluster.kubeconfig)).read_device_class(
        f"slot{n}.{cluster.resource_domain}"
    )
    assert cls.spec.extended_resource_name == resource
    names = [f"dra{n}-{i}" for i in range(3)]
    for name in names:
        work.create(pod_manifest(name, limits={resource: "1"}))
    try:
        placed = work.wait(names, timeout=60, bound=2, settle=3.0)
        bound = sorted(k for k, v in placed.items() if v.node)
        assert len(bound) == 2 and {placed[k].node for k in bound} == {node}, placed
        # Each bound pod holds one device of the node's pool, in a claim kube-scheduler made.
        assert len(held_devices(cluster, f"{node}/slot{n}")) == 2
        wait_for(lambda: allocated(cluster, node, resource) == (2, 2))
        waiting = next(k for k in names if k not in bound)
        work.delete([bound[0]])
        # The claim goes with its pod (garbage collection), the unit with it.
        assert work.wait([waiting], timeout=60)[waiting].node == node
    finally:
        work.delete(names)


def test_a_capacity_beyond_one_slice_works_and_a_decrease_keeps_held_devices(
    cluster: localcluster.ClusterInfo,
) -> None:
    work = Workload(api_client(cluster.kubeconfig))
    n = next(_names)
    node = cluster.nodes[1]
    name = f"wide{n}"
    pool = f"{node}/{name}"
    with policy(cluster) as p:
        resource = p.set_resource(name, 300, node=node).resource
        published = work.published(cluster.resource_domain, f"{cluster.resource_domain}/resource")
        assert published[node][name] == 300
        pods = [f"w{n}-{i}" for i in range(3)]
        for pod in pods:
            work.create(pod_manifest(pod, limits={resource: "1"}))
        try:
            assert all(v.node == node for v in work.wait(pods, timeout=60).values())
            wait_for(lambda: allocated(cluster, node, resource) == (300, 3))
            with pytest.raises(PolicyAPIError) as e:
                p.set_resource(name, 2, node=node)
            assert e.value.status == 409 and e.value.field == "capacity"
            held = held_devices(cluster, pool)
            assert len(held) == 3
            assert p.set_resource(name, 4, node=node).durable
            slices = work.published(cluster.resource_domain, f"{cluster.resource_domain}/resource")
            assert slices[node][name] == 4
            assert held <= published_devices(cluster, pool)
        finally:
            work.delete(pods)


def test_the_allocations_are_read_from_the_claims_and_a_decrease_is_refused_by_them(
    cluster: localcluster.ClusterInfo,
) -> None:
    """The claims are mode dra's allocations. A pod that requests no extended resource but
    names a ResourceClaim of two of the resource's devices holds nothing a pod count could
    see: get_cluster_state shows the two allocated once kube-scheduler has written the
    claim, a decrease below them is refused (409), and they are freed with the claim."""
    work = Workload(api_client(cluster.kubeconfig))
    dra = client.ResourceV1Api(api_client(cluster.kubeconfig))
    n = next(_names)
    node = cluster.nodes[2]
    short, claim, pod = f"claimed{n}", f"claim{n}", f"claimer{n}"
    with policy(cluster) as p:
        resource = p.set_resource(short, 3, node=node).resource
        dra.create_namespaced_resource_claim(
            "default",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": claim},
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "two",
                                "exactly": {
                                    "deviceClassName": f"{short}.{cluster.resource_domain}",
                                    "count": 2,
                                },
                            }
                        ]
                    }
                },
            },
        )
        manifest = pod_manifest(pod)
        manifest["spec"]["resourceClaims"] = [{"name": "c", "resourceClaimName": claim}]
        manifest["spec"]["containers"][0]["resources"]["claims"] = [{"name": "c"}]
        work.create(manifest)
        try:
            assert work.wait([pod], timeout=60)[pod].node == node
            assert len(held_devices(cluster, f"{node}/{short}")) == 2
            wait_for(lambda: allocated(cluster, node, resource) == (3, 2))
            with pytest.raises(PolicyAPIError, match="below the 2 already allocated") as e:
                p.set_resource(short, 1, node=node)
            assert e.value.status == 409 and e.value.field == "capacity"
        finally:
            work.delete([pod])
            dra.delete_namespaced_resource_claim(claim, "default")
        wait_for(lambda: allocated(cluster, node, resource) == (3, 0))
        assert p.set_resource(short, 1, node=node).durable
        p.delete_resource(short)


def test_what_slices_cannot_hold_and_another_writers_class_are_refused_changing_nothing(
    cluster: localcluster.ClusterInfo,
) -> None:
    n = next(_names)
    node = cluster.nodes[2]
    dra = client.ResourceV1Api(api_client(cluster.kubeconfig))
    taken = f"{cluster.resource_domain}/taken{n}"
    dra.create_device_class(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": f"someone-else-{n}"},
            "spec": {"extendedResourceName": taken},
        }
    )
    log = cluster.paths["logs"] / "extender.log"  # the service's watch of DeviceClasses sees it
    wait_for(lambda: f"someone-else-{n}" in log.read_text(errors="replace"))
    try:
        with policy(cluster) as p:
            before = p.cluster_state().nodes[node]
            with pytest.raises(PolicyAPIError, match="2048") as e:
                p.set_resource(f"big{n}", 2049, node=node)
            assert e.value.status == 422 and e.value.field == "capacity"
            with pytest.raises(PolicyAPIError, match=f"someone-else-{n}") as e:
                p.set_resource(f"taken{n}", 1, node=node)
            assert e.value.status == 409 and e.value.field == "name"
            assert p.cluster_state().nodes[node] == before
        published = Workload(api_client(cluster.kubeconfig)).published(
            cluster.resource_domain, f"{cluster.resource_domain}/resource"
        )
        assert not {f"big{n}", f"taken{n}"} & set(published.get(node, {}))
    finally:
        dra.delete_device_class(f"someone-else-{n}")


# When the decrease starts after its round's pods, seconds; pods arrive 8 ms apart.
DELAYS = tuple(i * 0.009 for i in range(6))  # 0-45 ms
PODS, SPACING = 12, 0.008


def test_a_capacity_decrease_racing_with_allocations_never_over_commits(
    cluster: localcluster.ClusterInfo,
) -> None:
    """What a user of the policy API checks: once a PUT has answered 200 (the capacity is
    published), no pod bound after it takes the node above that capacity, once
    kube-scheduler's in-flight allocations are done. kube-scheduler allocates devices in
    memory and writes each claim after; the service learns of it from the claim watch. Each
    round: 12 pods of one unit arrive 8 ms apart for the node with 12 units, and the capacity
    is lowered to 2 a few milliseconds in (later each round). The decrease is refused (409,
    below what is seen allocated) or taken. The history (every bind and departure from a
    watch, every accepted capacity from the PUT's answer, ordered by the API server's
    resourceVersion: escher_harness.capacity_history) never shows the node holding more pods
    than the capacity last accepted before their bind, but for kube-scheduler's in-flight
    allocations (pods it placed against the old devices before its watch brought the new
    slice, bound just after the answer; printed, and the one exception). Above all not as
    those pods leave while others wait: a device held above the capacity is published
    tainted, so the one a pod frees takes no waiting pod (published untainted, 12 binds in
    10 rounds refilled freed devices, 2.2-2.6 s after the 200). No node ever holds a claimed
    device it does not publish, and once the pods are gone it shows the capacity asked for,
    untainted."""
    api = api_client(cluster.kubeconfig)
    work = Workload(api)
    core = client.CoreV1Api(api)
    n = next(_names)
    node = cluster.nodes[0]
    short = f"race{n}"
    group = f"{node}/{short}"
    history = PodHistory(core, f"race={short}")
    accepted: list[Step] = []
    try:
        with policy(cluster) as p:

            def accept(capacity: int) -> int:
                """PUT the capacity; record it as accepted once answered 200."""
                try:
                    result = p.set_resource(short, capacity, node=node)
                except PolicyAPIError as e:
                    return e.status
                assert result.durable, result  # 200: published
                now = time.monotonic()
                accepted.append(Step(fence(core), now, "capacity", str(capacity)))
                return 200

            assert accept(PODS) == 200
            resource = f"{cluster.resource_domain}/{short}"
            for r, delay in enumerate(DELAYS):
                names = [f"{short}-{r}-{i}" for i in range(PODS)]
                lowered: list[int] = []

                def lower(delay: float, lowered: list[int] = lowered) -> None:
                    time.sleep(delay)  # pacing: where in the arrivals the decrease lands
                    lowered.append(accept(2))

                lowering = threading.Thread(target=lower, args=(delay,))
                lowering.start()
                for name in names:
                    work.create(pod_manifest(name, limits={resource: "1"}, labels={"race": short}))
                    time.sleep(SPACING)  # pacing: the arrivals' spacing
                lowering.join()
                assert lowered in ([200], [409]), lowered
                # Those that can be placed are, and a few more get their chance.
                work.wait(names, timeout=30, bound=2, settle=2.0)
                held, published = held_devices(cluster, group), published_devices(cluster, group)
                assert held <= published, f"round {r}: held {sorted(held - published)} unpublished"
                work.delete(names)  # those waiting get the devices of those leaving
                want = 2 if lowered == [200] else PODS
                until(
                    lambda want=want: (
                        len(published_devices(cluster, group)) == want
                        and not published_devices(cluster, group, tainted_only=True)
                    ),
                    f"round {r}: {want} devices published untainted",
                )
                assert accept(PODS) == 200
            # The watch has seen every pod go (and so every bind before it).
            created = {f"{short}-{r}-{i}" for r in range(len(DELAYS)) for i in range(PODS)}
            until(lambda: history.gone >= created, "the watch seeing every pod go")
            p.delete_resource(short)
    finally:
        history.stop()
    assert history.binds() >= 2 * len(DELAYS), history.steps  # the history is not empty
    over, in_flight = over_commits([*history.steps, *accepted], PODS)
    print("bound in flight against the old capacity:", in_flight)  # the product cannot stop them
    assert over == []


def test_slices_can_spare_real_kubelets_any_dra_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real node's kubelet calls the driver's kubelet plugin for each allocated device
    (NodePrepareResources), and fails the pod when none is registered. With
    dra_skip_node_operations and Kubernetes 1.37's DRAOptionalNodeOperations gate (KEP-5945,
    alpha), the slices say there is nothing to prepare: the field is kept by the API server,
    and pods are placed on nodes whose kubelet declares that feature."""
    monkeypatch.setenv("ESCHER_DRA_SKIP_NODE_OPERATIONS", "true")
    info = localcluster.up(
        localcluster.ClusterSpec(
            dir=tmp_path / "c",
            nodes=1,
            mode="dra",
            feature_gates={"DRAOptionalNodeOperations": True},
        )
    )
    try:
        with policy(info) as p:
            resource = p.set_resource("skip", 1, node=info.nodes[0]).resource
        dra = client.ResourceV1Api(api_client(info.kubeconfig))
        (one,) = [
            s for s in dra.list_resource_slice().items if s.spec.pool.name.endswith("/skip/0")
        ]
        assert one.spec.skip_node_operations == ["*"]
        work = Workload(api_client(info.kubeconfig))
        work.create(pod_manifest("skipper", limits={resource: "1"}))
        # kube-scheduler places such a device only on a node whose kubelet declares the
        # feature (status.declaredFeatures, as a kubelet with the gate on does; kwok does not).
        waiting = work.wait(["skipper"], timeout=5, settle=2.0)["skipper"]
        assert waiting.node is None, waiting
        work.delete(["skipper"])
        client.CoreV1Api(api_client(info.kubeconfig)).patch_node_status(
            info.nodes[0], {"status": {"declaredFeatures": ["DRAOptionalNodeOperations"]}}
        )
        # A pod tried before kube-scheduler's node cache has the declared feature is parked
        # until a requeue that a status-only node change may never bring (seen once under
        # a loaded machine): a new pod each time, until one is tried with the node as it is.
        placed = None
        for attempt in range(6):
            name = f"skipper{attempt + 2}"
            work.create(pod_manifest(name, limits={resource: "1"}))
            placed = work.wait([name], timeout=10)[name].node
            if placed is not None:
                break
            work.delete([name])
        assert placed == info.nodes[0]
    finally:
        localcluster.down(info.dir, keep_logs=True)
