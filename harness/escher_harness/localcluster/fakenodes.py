"""Creates fake nodes: Node objects with a Ready condition and capacity, but no kubelet.

Called by the local control plane's `up` (escher_harness.localcluster.cluster). kube-scheduler
places pods on them like on real nodes. Each carries FAKE_NODE_ANNOTATION, which is what the
kwok controller selects the nodes it plays the kubelet of by (escher_harness.localcluster.kwok):
with kwok, bound pods run and finish; without it they stay Pending with spec.nodeName set.
A Topology labels them into a hierarchy (zones of blocks of racks of nodes) by the label keys
of extender.gang.topology's default hierarchy, for the topology-aware gang benchmark.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, cast

from kubernetes import client
from urllib3 import HTTPResponse

from extender.gang.topology import DEFAULT, parse

# Marks the project's fake nodes, so that kwok manages these and no other node.
FAKE_NODE_ANNOTATION: Final = "harness.escher.io/fake-node"


@dataclass(frozen=True)
class NodeShape:
    """What every fake node looks like: capacity (= allocatable) and labels."""

    cpu: str = "32"
    memory: str = "128Gi"
    pods: str = "110"
    labels: Mapping[str, str] = field(default_factory=dict)
    extended_resources: Mapping[str, str] = field(default_factory=dict)


_LEVELS = {lv.name: lv.key for lv in parse(DEFAULT).levels}


@dataclass(frozen=True)
class Topology:
    """Nodes labelled in order into racks of `rack_nodes`, blocks of `racks_per_block` racks
    and zones of `blocks_per_zone` blocks: node i is in rack i // rack_nodes, and so on up. The
    last rack, block and zone hold what is left (they may be smaller). Domain names are unique
    cluster-wide (`rack-007` is one rack, whatever its block), so a label value alone names a
    domain. The keys are the default hierarchy's (extender.gang.topology.DEFAULT)."""

    rack_nodes: int = 32
    racks_per_block: int = 16
    blocks_per_zone: int = 4

    def __post_init__(self) -> None:
        if min(self.rack_nodes, self.racks_per_block, self.blocks_per_zone) < 1:
            raise ValueError("topology: every level holds at least one of the level below")

    def domains(self, index: int) -> dict[str, str]:
        """Node `index`'s domain at each level, by level name (zone, block, rack)."""
        rack = index // self.rack_nodes
        block = rack // self.racks_per_block
        zone = block // self.blocks_per_zone
        return {"zone": f"zone-{zone}", "block": f"block-{block:02d}", "rack": f"rack-{rack:03d}"}

    def labels(self, index: int) -> dict[str, str]:
        """Node `index`'s topology labels (the hostname label is every node's already)."""
        return {_LEVELS[level]: value for level, value in self.domains(index).items()}

    def nodes_per_domain(self, level: str) -> int:
        """Nodes in a full domain of `level` (zone, block, rack or host)."""
        per = {"host": 1, "rack": self.rack_nodes}
        per["block"] = per["rack"] * self.racks_per_block
        per["zone"] = per["block"] * self.blocks_per_zone
        return per[level]


def node_index(name: str) -> int:
    """The index of a node the local control plane named `node-<i>`."""
    return int(name.rsplit("-", 1)[1])


def node_manifest(
    name: str, shape: NodeShape, labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    resources = {
        "cpu": shape.cpu,
        "memory": shape.memory,
        "pods": shape.pods,
        **shape.extended_resources,
    }
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {**shape.labels, **(labels or {}), "kubernetes.io/hostname": name},
            "annotations": {FAKE_NODE_ANNOTATION: "true"},
        },
        "status": {
            # No kubelet copies capacity into allocatable, so both are written.
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "fake node, no kubelet",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        },
    }


def create_nodes(
    api: client.ApiClient,
    names: Sequence[str],
    shape: NodeShape,
    *,
    workers: int = 16,
    progress: Callable[[int, int], None] | None = None,
    topology: Topology | None = None,
) -> None:
    """Create the nodes concurrently; `progress(done, total)` is called as they are created.
    With `topology`, the i-th name gets the i-th node's topology labels. The first failure
    (kubernetes.client.ApiException) cancels the rest and is raised."""
    core = client.CoreV1Api(api)

    index = {name: i for i, name in enumerate(names)}

    def create(name: str) -> None:
        # The client serialises a dict as is (the V1Node annotation notwithstanding), and the
        # response is not deserialised: that would cost more than the request itself. The raw
        # response must be read and released, or its connection never returns to the pool and
        # every request pays for a new TLS connection.
        labels = topology.labels(index[name]) if topology else None
        body = cast(client.V1Node, node_manifest(name, shape, labels))
        response = cast(HTTPResponse, core.create_node(body=body, _preload_content=False))
        response.read()
        response.release_conn()

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fakenodes") as pool:
        futures = [pool.submit(create, name) for name in names]
        try:
            for done, future in enumerate(as_completed(futures), start=1):
                future.result()
                if progress is not None:
                    progress(done, len(names))
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise
