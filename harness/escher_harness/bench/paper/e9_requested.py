"""E9, the paper's Fig. 8c: the scheduling latency of one pod against how many distinct
ephemeral resources it requests (10 to 1,000). Paper, 50 Ray nodes: 1.16 / 1.21 / 1.22 /
1.78 / 3.36 ms at 10 / 50 / 100 / 500 / 1,000.

Per m, ascending: the resources present are raised to m, each set with `pods` units on the
same NODES nodes (the first by name: each pod fits there and nowhere else, so kube-scheduler
filters every node and matches the whole request on five); then `pods` pods, one after
another, each requesting one unit of each of the m resources. A pod's latency is from its
create call to its being first seen bound by a watch (client side: the API server's create,
kube-scheduler's queue, cycle and binding, and the watch's delivery). Pods keep running
until the size is done (the capacity covers them all).

Kubernetes sets no limit of its own on a pod's count of extended resources; what limits it
is a request's size (the API server's 3 MiB body, etcd's 1.5 MiB value). Mode dra maps each
resource onto a DeviceClass, and kube-scheduler asks for every one in a single
ResourceClaim, whose requests (and allocation results) are at most 32
(k8s.io/api resource/v1 DeviceRequestsMaxSize): a pod requesting more stays unschedulable.
A pod not bound within _BOUND_TIMEOUT ends its size, with the reason kube-scheduler gave,
and the larger sizes are not run. Called by escher_harness.bench.paper.runner.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Final

from escher_harness.bench.esl_bench import Bound
from escher_harness.bench.paper import resources
from escher_harness.bench.paper.context import LABEL, Context
from escher_harness.bench.stats import summary
from escher_harness.workload import Workload, pod_manifest

NAME: Final = "E9"
FIGURE: Final = "Fig. 8c: per-pod latency against resources requested"
X: Final = "resources requested"
PAPER_MS: Final = {10: 1.16, 50: 1.21, 100: 1.22, 500: 1.78, 1000: 3.36}
SIZES: Final = (10, 50, 100, 500, 1000)
QUICK_SIZES: Final = (10, 100)
PODS: Final = 10
QUICK_PODS: Final = 5
NODES: Final = 5  # the nodes that carry every resource
_RUN: Final = "e9"
_BOUND_TIMEOUT: Final = 60.0
_CREATORS: Final = 16


def run(ctx: Context, sizes: Sequence[int], pods: int, out: dict[str, Any]) -> None:
    """Fill `out` with {m: figures} per count of resources requested, each when measured."""
    present: list[str] = []
    work = Workload(ctx.api)
    bound = Bound(work)
    try:
        for m in sorted(sizes):
            more = [f"e9-{ctx.rep}-{i}" for i in range(len(present), m)]
            resources.on_nodes(ctx, more, pods, min(NODES, len(ctx.info.nodes)), _CREATORS)
            present += more
            try:
                out[str(m)] = f = measure(ctx, work, bound, present, pods)
            finally:
                ctx.delete_pods(_RUN)
            p50 = (f["latency_ms"] or {}).get("p50")
            ctx.progress(f"E9 {m} resources requested: p50 {p50} ms per pod")
            if f["unschedulable"]:
                ctx.progress(f"E9 stops at {m}: {f['unschedulable']}")
                break
    finally:
        bound.close()
        resources.remove(ctx, present, _CREATORS)


def measure(
    ctx: Context, work: Workload, bound: Bound, present: Sequence[str], pods: int
) -> dict[str, Any]:
    m = len(present)
    limits = {ctx.resource(n): "1" for n in present}
    latencies: list[float] = []
    for j in range(pods):
        name = f"e9-{ctx.rep}-{m}-{j}"
        t0 = time.monotonic()
        work.create(pod_manifest(name, limits=limits, labels={LABEL: _RUN}))
        while (b := bound.get(name)) is None and time.monotonic() - t0 < _BOUND_TIMEOUT:
            time.sleep(0.002)  # the watch stamps the bind; this only notices it
        if b is None:
            reason = work.placements([name]).get(name)
            return _figures(m, latencies, reason.reason if reason else "not found")
        latencies.append((b[0] - t0) * 1000)
    return _figures(m, latencies, "")


def _figures(m: int, latencies: Sequence[float], unschedulable: str) -> dict[str, Any]:
    return {
        "requested": m,
        "pods_bound": len(latencies),
        "latency_ms": summary(latencies) if latencies else None,
        "latencies_ms": [round(x, 2) for x in latencies],
        "unschedulable": unschedulable[:500],
    }
