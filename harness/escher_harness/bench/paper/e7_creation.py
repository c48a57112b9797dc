"""E7, the paper's Fig. 8a: resource creation latency. How long from set_resource until a
pod can use the resource, amortised per resource, for k resources at once.

Per k (10, 100, 1,000 in the paper) and per client concurrency:

1. k pods are created, pod i requesting one unit of resource i, which does not exist yet;
   the experiment waits until kube-scheduler has found every one unschedulable, then
   wake.SETTLE longer (past its first back-off, so a resource's arrival is what wakes each);
2. from t0 the k resources are created through the policy API, each on one node
   (resources.placement), `clients` calls at a time (1: one after another, as an
   application's loop; more: the concurrency an asynchronous set_resource, as Ray's was,
   would give it); a pod watch records when each pod is first seen bound;
3. the figure is (last pod bound - t0) / k: the time per resource until the first pod that
   uses it is bound, amortised; beside it the calls alone, (last call returned - t0) / k,
   and each resource's lag from its call's return to its pod bound.

The paper measured Ray's asynchronous set_resource plus a no-op task that requests it
("mean time per resource until a task can use it": 1.02 ms at 10, 0.73 ms at 1,000). Here
each call returns once the resource is on the Node objects (or the DRA objects). Called by
escher_harness.bench.paper.runner.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

from escher_harness.bench import wake
from escher_harness.bench.esl_bench import Bound
from escher_harness.bench.paper import resources
from escher_harness.bench.paper.context import LABEL, Context
from escher_harness.waits import until
from escher_harness.workload import Workload, pod_manifest

NAME: Final = "E7"
FIGURE: Final = "Fig. 8a: resource creation latency"
X: Final = "resources created"
PAPER_MS: Final = {10: 1.02, 1000: 0.73}
SIZES: Final = (10, 100, 1000)
QUICK_SIZES: Final = (10, 100)
CLIENTS: Final = (1, 16)
_RUN: Final = "e7"
_BOUND_TIMEOUT: Final = 600.0


def run(ctx: Context, sizes: Sequence[int], clients: Sequence[int], out: dict[str, Any]) -> None:
    """Fill `out` with {clients: {k: figures}}, each size as soon as it is measured."""
    for c in clients:
        for k in sizes:
            r = measure(ctx, k, c)
            out.setdefault(str(c), {})[str(k)] = r
            ctx.progress(
                f"E7 {k} resources, {c} client(s): {r['amortised_ms']} ms per resource "
                f"to its pod bound ({r['calls_ms']} ms the calls alone)"
            )


def measure(ctx: Context, k: int, clients: int) -> dict[str, Any]:
    names = [f"e7-{ctx.rep}-{clients}-{k}-{i}" for i in range(k)]
    where = resources.placement(ctx, names)
    work = Workload(ctx.api)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda n: work.create(_pod(ctx, n)), names))
    bound = Bound(work)
    try:
        until(
            lambda: _all_unschedulable(work, names),
            f"E7: {k} pods found unschedulable",
            timeout=300,
            every=0.5,
        )
        time.sleep(wake.SETTLE)  # past the first back-off: the resource wakes each pod
        t0 = time.monotonic()
        returned = resources.spread(ctx, where, 1, clients)
        until(
            lambda: all(bound.get(n) for n in names),
            f"E7: {k} pods bound",
            timeout=_BOUND_TIMEOUT,
            every=0.05,
        )
        return figures(k, clients, t0, returned, [bound.get(n) for n in names], where, names)
    finally:
        bound.close()
        ctx.delete_pods(_RUN)
        resources.remove(ctx, names, 16)


def figures(
    k: int,
    clients: int,
    t0: float,
    returned: Sequence[float],
    bound: Sequence[tuple[float, str] | None],
    where: dict[str, str],
    names: Sequence[str],
) -> dict[str, Any]:
    """The run's figures from when each call returned and each pod was bound (and where)."""
    seen = [(b, n) for b, n in zip(bound, names, strict=True) if b is not None]
    lags = [(b[0] - r) * 1000 for b, r in zip(bound, returned, strict=True) if b is not None]
    return {
        "k": k,
        "clients": clients,
        "resources_timed": len(seen),
        "pods_on_their_resource_node": sum(1 for b, n in seen if b[1] == where[n]),
        "amortised_ms": round((max(b[0] for b, _ in seen) - t0) * 1000 / k, 3),
        "calls_ms": round((max(returned) - t0) * 1000 / k, 3),
        "lag_ms_p50": round(statistics.median(lags), 1),
        "lag_ms_max": round(max(lags), 1),
    }


def _pod(ctx: Context, name: str) -> dict[str, Any]:
    return pod_manifest(
        name,
        limits={ctx.resource(name): "1"},
        requests={"cpu": "10m", "memory": "16Mi"},
        labels={LABEL: _RUN},
    )


def _all_unschedulable(work: Workload, names: Sequence[str]) -> bool:
    placed = work.placements(names)
    if any(p.node for p in placed.values()):
        raise RuntimeError("E7: a pod asking for a resource that does not exist was bound")
    return len(placed) == len(names) and all(p.reason for p in placed.values())
