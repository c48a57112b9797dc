"""kube-scheduler's end-to-end throughput (pods/s) on the local control plane, by mode.

For each mode: start the real control plane (extender: kube-scheduler asks the extender and
binds through it; pure: the same kube-scheduler with no extender, enforcing the written-back
extended resources), create the pods while no node has the resource they request (so they
wait, unschedulable, and pod creation does not pace the measurement), then create the
resource on every node with one set_resource call and time until the last pod is bound.
pods/s = pods / (last bind - set_resource call). Also checks that no node went over capacity.
Called by escher_harness.bench.extender_bench.
"""

from __future__ import annotations

import math
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from escher_harness import localcluster
from escher_harness.bench.stats import summary
from escher_harness.kubeclient import api_client
from escher_harness.workload import Workload, pod_manifest
from extender.esl.client import PolicyClient

RESOURCE = "tput"


def run_mode(
    mode: Literal["extender", "pure"],
    nodes: int,
    pods: int,
    out: Path,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"escher-tput-{mode}-") as tmp:
        progress(f"throughput: starting the control plane in {mode} mode with {nodes} nodes")
        info = localcluster.up(localcluster.ClusterSpec(dir=Path(tmp), nodes=nodes, mode=mode))
        try:
            assert info.extender_url is not None
            api = api_client(info.kubeconfig, pool_size=16)
            work = Workload(api)
            full = f"{info.resource_domain}/{RESOURCE}"
            names = [f"tput-{i}" for i in range(pods)]
            progress(f"throughput: creating {pods} pods requesting {full} (none exists yet)")
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda n: work.create(pod_manifest(n, limits={full: "1"})), names))
            # Every pod tried once and is parked unschedulable; its first backoff (1 s) over.
            deadline = time.monotonic() + 120
            while sum(1 for p in work.placements(names).values() if p.reason) < pods:
                if time.monotonic() > deadline:
                    raise RuntimeError("pods were not all marked unschedulable within 120s")
                time.sleep(0.2)
            time.sleep(1.5)
            stop = threading.Event()
            result: dict[str, dict[str, float]] = {}
            watcher = threading.Thread(
                target=lambda: result.setdefault("t", work.watch_bound(pods, stop))
            )
            watcher.start()
            time.sleep(0.5)  # the watch is established
            per_node = math.ceil(pods / nodes) + 1
            progress(f"throughput: set_resource({RESOURCE}, {per_node}) on all {nodes} nodes")
            with PolicyClient(info.extender_url, info.token) as policy:
                t0 = time.monotonic()
                policy.set_resource(RESOURCE, per_node)
                set_done = time.monotonic()
                watcher.join(timeout=300)
                stop.set()
                watcher.join()
                bound = result.get("t", {})
                state = policy.cluster_state()
            over = [
                n
                for n, res in state.nodes.items()
                if full in res and res[full].allocated > res[full].capacity
            ]
            if len(bound) < pods:
                raise RuntimeError(f"{mode}: only {len(bound)} of {pods} pods bound in 300s")
            last = max(bound.values())
            latencies = [(t - t0) * 1000 for t in bound.values()]
            return {
                "mode": mode,
                "nodes": nodes,
                "pods": pods,
                "seconds": round(last - t0, 3),
                "pods_per_s": round(pods / (last - t0), 1),
                "set_resource_ms": round((set_done - t0) * 1000, 1),
                "bind_ms_after_set_resource": summary(latencies),
                "nodes_over_capacity": over,
            }
        finally:
            localcluster.down(Path(tmp), keep_logs=False)


def run(nodes: int, pods: int, out: Path, progress: Callable[[str], None]) -> dict[str, Any]:
    """Both modes in one run, and their ratio."""
    modes = {
        "extender": run_mode("extender", nodes, pods, out, progress),
        "pure": run_mode("pure", nodes, pods, out, progress),
    }
    return {
        "modes": modes,
        "ratio_extender_to_pure": round(
            modes["extender"]["pods_per_s"] / modes["pure"]["pods_per_s"], 3
        ),
    }
