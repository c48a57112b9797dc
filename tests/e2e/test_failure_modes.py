"""How each mode fails, on the real control plane: pure (Node status), dra (ResourceSlices)
and extender (every pod sent, the embedded cluster's default).

- The service down: which pods still schedule. Pure and dra: pods asking for resources
  already in the cluster are placed by kube-scheduler alone. Extender mode: nothing that
  needs the extender is (`ignorable: false`), until it is back.
- A kubelet restarting: it zeroes the extended resources it does not know in its node's
  status, and (Kubernetes 1.37's kubelet, before any DRA plugin registers) deletes every
  ResourceSlice of its node, whatever the driver. The write-back puts the status back (pure,
  extender); in dra the status holds nothing of ours, and the publisher sees its slices gone
  and publishes them again.
- A node recreated (deleted, and a Node of the same name created): its resources come back
  in every mode, from the EphemeralResource object the policy API keeps (policy_objects),
  which is reconciled onto the new node.

docs/modes.md's failure table is this module's result.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import pytest
from builders import cluster_of
from kubernetes import client

from escher_harness import localcluster
from escher_harness.kubeclient import api_client
from escher_harness.localcluster.fakenodes import NodeShape, create_nodes
from escher_harness.workload import Workload, pod_manifest
from extender.esl.client import PolicyClient

pytestmark = [pytest.mark.e2e, pytest.mark.cluster(nodes=2, node_cpu="8")]

_names = itertools.count()
MODES = ["pure", "dra", "extender"]


def shown(info: localcluster.ClusterInfo, node: str, short: str) -> int:
    """Units of `short` kube-scheduler sees on `node`: its status, or in dra its devices."""
    work = Workload(api_client(info.kubeconfig))
    d = info.resource_domain
    if info.mode == "dra":
        return work.published(d, f"{d}/resource").get(node, {}).get(short, 0)
    value = work.node_resources(node, f"{d}/{short}")["allocatable"].get(f"{d}/{short}", "0")
    return int(value)


def eventually(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.2)


@pytest.mark.parametrize("fresh_cluster", [cluster_of(m) for m in MODES], ids=MODES, indirect=True)
def test_service_down_node_reset_and_node_recreated(
    fresh_cluster: localcluster.ClusterInfo,
) -> None:
    info = fresh_cluster
    assert info.extender_url is not None and info.token is not None
    api = api_client(info.kubeconfig)
    work, core = Workload(api), client.CoreV1Api(api)
    first, second = info.nodes
    with PolicyClient(info.extender_url, info.token) as policy:
        resource = policy.set_resource("fm", 2, node=first).resource
        assert policy.set_resource("fm", 1, node=second).durable

    # The service down.
    localcluster.stop_component(info.dir, "extender")
    pod = f"down-{next(_names)}"
    work.create(pod_manifest(pod, limits={resource: "1"}))
    if info.mode == "extender":
        # kube-scheduler tried the pod and could not reach the extender; then it stays pending.
        eventually("the pod's attempt to fail", lambda: bool(work.placements([pod])[pod].reason))
        placed = work.wait([pod], timeout=3.0)[pod]
        assert placed.node is None, "placed without the extender in its path"
        assert "connection refused" in placed.reason, placed.reason
    else:
        placed = work.wait([pod], timeout=30, settle=3.0)[pod]
        assert placed.node in info.nodes, placed.reason
    info = localcluster.start_component(info.dir, "extender")
    assert work.wait([pod], timeout=60)[pod].node in info.nodes
    work.delete([pod])

    # A kubelet restarting: the node's status reset, or in dra its slices deleted as the
    # kubelet's DRA plugin manager does at startup (a DeleteCollection on the node's name).
    if info.mode == "dra":
        dra, on_first = client.ResourceV1Api(api), f"spec.nodeName={first}"
        before = {s.metadata.uid for s in dra.list_resource_slice(field_selector=on_first).items}
        assert before, "the node has no slices to wipe"
        dra.delete_collection_resource_slice(field_selector=on_first)
        eventually(
            "new slices",
            lambda: (
                not before
                & {s.metadata.uid for s in dra.list_resource_slice(field_selector=on_first).items}
            ),
        )
    else:
        core.patch_node_status(
            first,
            {"status": {"capacity": {resource: None}, "allocatable": {resource: None}}},
        )
    eventually("the reset node shows its resource", lambda: shown(info, first, "fm") == 2)

    # A node recreated under the same name.
    core.delete_node(second)
    eventually(
        "the node gone", lambda: second not in {n.metadata.name for n in core.list_node().items}
    )
    create_nodes(api, [second], NodeShape(cpu="8"))
    eventually("the recreated node shows its resource", lambda: shown(info, second, "fm") == 1)
    pod = f"back-{next(_names)}"
    manifest = pod_manifest(pod, limits={resource: "1"})
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": second}
    work.create(manifest)
    assert work.wait([pod], timeout=60)[pod].node == second
