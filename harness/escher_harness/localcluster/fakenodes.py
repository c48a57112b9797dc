"""Creates fake nodes: Node objects with a Ready condition and capacity, but no kubelet.

Called by the local control plane's `up` (escher_harness.localcluster.cluster). kube-scheduler
places pods on them like on real nodes. Each carries FAKE_NODE_ANNOTATION, which is what the
kwok controller selects the nodes it plays the kubelet of by (escher_harness.localcluster.kwok):
with kwok, bound pods run and finish; without it they stay Pending with spec.nodeName set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, cast

from kubernetes import client
from urllib3 import HTTPResponse

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


def node_manifest(name: str, shape: NodeShape) -> dict[str, Any]:
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
            "labels": {**shape.labels, "kubernetes.io/hostname": name},
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
) -> None:
    """Create the nodes concurrently; `progress(done, total)` is called as they are created.
    The first failure (kubernetes.client.ApiException) cancels the rest and is raised."""
    core = client.CoreV1Api(api)

    def create(name: str) -> None:
        # The client serialises a dict as is (the V1Node annotation notwithstanding), and the
        # response is not deserialised: that would cost more than the request itself. The raw
        # response must be read and released, or its connection never returns to the pool and
        # every request pays for a new TLS connection.
        body = cast(client.V1Node, node_manifest(name, shape))
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
