"""The extender's memory at scale: resident set size with `nodes` nodes and `pods` bound pods.

Starts the local control plane in extender mode (kwok off), gives every node an ephemeral
resource, then creates the pods already bound (spec.nodeName set, as a kubelet-less cluster
with pods placed earlier looks to a restarted extender), each holding one unit of the resource
and a little cpu, so the extender's cluster view and ledger hold them all. Reads the
extender's RSS (its process group, from /proc) with the nodes only, once every pod is in its
ledger (its escher_ledger_holdings gauge), and after the pods are deleted again. Called by
escher_harness.bench.extender_bench.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from escher_harness import localcluster
from escher_harness.bench import promhist
from escher_harness.kubeclient import api_client
from escher_harness.localcluster.processes import rss_bytes
from escher_harness.workload import Workload, pod_manifest
from extender.core.ledger import HolderKind
from extender.esl.client import PolicyClient

RESOURCE = "mem"
LABEL = "bench.escher.io/memory"


def run(nodes: int, pods: int, progress: Callable[[str], None]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="escher-memory-") as tmp:
        progress(f"memory: starting the control plane in extender mode with {nodes} nodes")
        spec = localcluster.ClusterSpec(
            dir=Path(tmp), nodes=nodes, mode="extender", scope="every-pod", kwok=False,
            client_qps=1000, client_burst=2000, timeout=300.0,
        )  # fmt: skip
        info = localcluster.up(spec)
        try:
            extender = next(p for p in info.processes if p.name == "extender")
            assert info.extender_url is not None
            api = api_client(info.kubeconfig, pool_size=32)
            with PolicyClient(info.extender_url, info.token, timeout=120) as policy:
                full = policy.set_resource(RESOURCE, pods // nodes + 2).resource
            time.sleep(2)
            idle = rss_bytes(extender)
            progress(f"memory: creating {pods} bound pods")
            started = time.monotonic()
            work = Workload(api)
            with ThreadPoolExecutor(16) as pool:
                list(
                    pool.map(
                        lambda i: work.create(_bound_pod(i, info.nodes[i % nodes], full)),
                        range(pods),
                    )
                )
            created = time.monotonic() - started
            seen = _wait_for_holdings(info, pods, progress)
            loaded = rss_bytes(extender)
            progress(
                f"memory: RSS {idle / 2**20:.1f} MiB with the nodes only, "
                f"{loaded / 2**20:.1f} MiB with {pods} pods; deleting the pods"
            )
            _delete_all(client.CoreV1Api(api))
            _wait_for_holdings(info, 0, progress)
            time.sleep(2)
            after = rss_bytes(extender)
            progress(f"memory: RSS {after / 2**20:.1f} MiB after the pods are deleted")
            api.close()  # type: ignore[no-untyped-call]
            return {
                "nodes": nodes,
                "pods": pods,
                "rss_mib_nodes_only": round(idle / 2**20, 1),
                "rss_mib_with_pods": round(loaded / 2**20, 1),
                "rss_mib_after_delete": round(after / 2**20, 1),
                "kib_per_pod": round((loaded - idle) / pods / 1024, 2),
                "seconds_to_create": round(created, 1),
                "seconds_until_all_in_ledger": round(seen, 1),
            }
        finally:
            localcluster.down(Path(tmp))


def _delete_all(core: client.CoreV1Api) -> None:
    """Delete the benchmark's pods. One delete-collection of 50,000 pods outlasts the API
    server's request timeout (504) and leaves the rest: it is sent again until none is left."""
    for _ in range(20):
        try:
            core.delete_collection_namespaced_pod(
                "default", label_selector=LABEL, grace_period_seconds=0
            )
            return
        except ApiException as e:
            if e.status != 504:
                raise
    raise RuntimeError("the pods were not deleted after 20 delete-collection calls")


def _bound_pod(i: int, node: str, resource: str) -> dict[str, Any]:
    manifest = pod_manifest(
        f"mem-{i}", limits={resource: "1"}, requests={"cpu": "10m"}, labels={LABEL: "1"}
    )
    manifest["spec"]["nodeName"] = node
    return manifest


def _wait_for_holdings(
    info: localcluster.ClusterInfo, want: int, progress: Callable[[str], None]
) -> float:
    """Seconds until the extender's ledger holds exactly `want` bound pods."""
    started = time.monotonic()
    deadline = started + 900
    last = -1.0
    while True:
        text = httpx.get(
            f"{info.extender_url}/metrics",
            headers={"Authorization": f"Bearer {info.token}"},
            timeout=30,
        ).text
        held = _bound_holdings(text)
        if held == want:
            return time.monotonic() - started
        if held != last:
            progress(f"memory: {held:.0f} of {want} pods in the extender's ledger")
            last = held
        if time.monotonic() > deadline:
            raise RuntimeError(f"the extender holds {held:.0f} pods, not {want}, after 900s")
        time.sleep(2)


def _bound_holdings(text: str) -> float:
    by_kind = promhist.gauges(text, "escher_ledger_holdings", lambda labels: labels.get("kind"))
    return by_kind.get(HolderKind.POD.value, 0.0)  # bound pods, as the API server shows them
