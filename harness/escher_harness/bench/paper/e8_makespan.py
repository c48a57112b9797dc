"""E8, the paper's Fig. 8b: the makespan of many no-op pods that request no resource, with
r ephemeral resources present in the cluster (10 to 1,000). The paper found it flat
(3.5-3.9 s for 10,000 tasks on 50 Ray nodes): resources no task asks for cost the
scheduler nothing.

Per r, ascending: the resources present are raised to r (resources.spread, each on one
node, capacity 1; set-up, not timed), then `pods` pods with no requests and a run time of
0 (kwok moves each to Succeeded as soon as it runs) are created by 16 client threads. The
makespan is from the first create call to the last pod seen Succeeded by a watch; beside it,
when the last create call returned (whether creation paced it) and the last pod was bound.
Called by escher_harness.bench.paper.runner.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

from escher_harness.bench.paper import resources
from escher_harness.bench.paper.context import LABEL, Context
from escher_harness.bench.paper.podwatch import Succeeded
from escher_harness.workload import Progress, Workload, pod_manifest

NAME: Final = "E8"
FIGURE: Final = "Fig. 8b: makespan with resources present"
X: Final = "resources present"
PAPER_S: Final = (3.5, 3.9)  # the figure's range over 10-1,000 resources, for 10,000 tasks
SIZES: Final = (10, 100, 1000)
QUICK_SIZES: Final = (10, 1000)
PODS: Final = 10_000
QUICK_PODS: Final = 300
_RUN: Final = "e8"
_CREATORS: Final = 16
_DEADLINE: Final = 900.0  # seconds for every pod of one size to be Succeeded


def run(ctx: Context, sizes: Sequence[int], pods: int, out: dict[str, Any]) -> None:
    """Fill `out` with {r: figures} per count of resources present, each when measured."""
    present: list[str] = []
    try:
        for r in sorted(sizes):
            more = [f"e8-{ctx.rep}-{i}" for i in range(len(present), r)]
            resources.spread(ctx, resources.placement(ctx, more), 1, _CREATORS)
            present += more
            out[str(r)] = f = measure(ctx, r, pods)
            ctx.progress(
                f"E8 {r} resources present: {pods} pods in {f['makespan_s']} s "
                f"(created by {f['created_s']} s)"
            )
    finally:
        resources.remove(ctx, present, _CREATORS)


def measure(ctx: Context, r: int, pods: int) -> dict[str, Any]:
    names = [f"e8-{ctx.rep}-{r}-{i:05d}" for i in range(pods)]
    work = Workload(ctx.api)
    watch = Succeeded(work, set(names), _DEADLINE)
    time.sleep(1.0)  # the watch lists before the first pod exists
    try:
        t0 = time.monotonic()
        with ThreadPoolExecutor(_CREATORS) as pool:
            list(pool.map(lambda n: work.create(_pod(n)), names))
        created = time.monotonic()
        watch.thread.join()
        return figures(r, pods, t0, created, watch.progress)
    finally:
        ctx.delete_pods(_RUN)


def figures(
    r: int, pods: int, t0: float, created: float, progress: dict[str, Progress]
) -> dict[str, Any]:
    done = [p.phases["Succeeded"] for p in progress.values() if "Succeeded" in p.phases]
    bound = [p.bound for p in progress.values() if p.bound is not None]
    return {
        "resources": r,
        "pods": pods,
        "pods_bound": len(bound),
        "pods_succeeded": len(done),
        "makespan_s": round(max(done) - t0, 3) if len(done) == pods else None,
        "last_bound_s": round(max(bound) - t0, 3) if bound else None,
        "created_s": round(created - t0, 3),
    }


def _pod(name: str) -> dict[str, Any]:
    return pod_manifest(name, labels={LABEL: _RUN}, run_time=0)
