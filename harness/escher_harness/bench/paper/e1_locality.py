"""E1 and E2, the paper's Fig. 5a and 5b: WordCount's data locality. Its input is split into
one chunk per node; each map task reads one chunk. Placement is measured (which node each
task is bound to, by the real kube-scheduler); the tasks' run times are a model, applied by
kwok.

Rows (`ROWS`, per the mode of the cluster they run on):
- random: each task required (node affinity) on a node drawn by the seeded RNG from the job's
  nodes: placement that ignores where the data is (the paper's baseline).
- native: each task required on its chunk's node by Kubernetes' own node affinity (the
  paper's Kubernetes row).
- pure, extender: ESCHER's policy, the paper's 2 lines: a resource `data-<chunk>` with one
  unit on the chunk's node (set_resource through the policy API, before the job: the data
  is there before the job starts), each task requesting one unit of its chunk's resource.

The run-time model (`Model`): a map task on its chunk's node runs T(c) = t0 + c x process
seconds (c the chunk's GB); on any other node it first fetches the chunk, T(c) + c x fetch.
The constants are a least-squares fit of the paper's 100-node rows (Kubernetes: t0 32 s,
11.6 s/GB, i.e. 86 MB/s; random minus Kubernetes: 25.9 s/GB, i.e. 38.6 MB/s over the
network), so random's slowdown follows from its measured placement through a model fitted
to the paper's own random row, not from anything measured here. Every modelled time runs
`scale` times faster on kwok (10: the paper's 89 s runs 8.9 s), and the makespans reported
are the measured wall times times `scale`, so the scheduling's own time counts 10x too.

A job: chunks on the first n nodes (sorted by name), one task per chunk (1 cpu each, nodes of
4 cpu), created by 16 threads; when a watch first sees a task bound, its run time is set
(the annotation kwok reads: local or remote by its node); the makespan is from the first
create call to the last task seen Succeeded. E1 varies the input at n = all nodes, with
chunks of input / 100 GB (the paper's 100 nodes, whatever the cluster's size); E2 varies n
with the paper's 50 GB input spread over n chunks. Called by escher_harness.bench.paper.runner.
"""

from __future__ import annotations

import dataclasses
import random
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kubernetes import client

from escher_harness import localcluster
from escher_harness.bench import approaches
from escher_harness.bench.gang_bench import order
from escher_harness.bench.paper import resources
from escher_harness.bench.paper.context import LABEL, Context
from escher_harness.bench.paper.podwatch import Succeeded
from escher_harness.kubeclient import api_client
from escher_harness.localcluster.kwok import RUN_TIME_ANNOTATION, format_run_time
from escher_harness.workload import Workload, pod_manifest
from extender.esl.client import PolicyClient

FIGURE_E1: Final = "Fig. 5a: WordCount makespan against input size"
FIGURE_E2: Final = "Fig. 5b: WordCount makespan against cluster size"
# The rows each mode's cluster runs; the paper's names for them.
ROWS: Final[Mapping[str, tuple[str, ...]]] = {
    "pure": ("random", "native", "pure"),
    "extender": ("extender",),
}
PAPER_ROW: Final = {"random": "random", "native": "Kubernetes", "pure": "ESCHER"}
# The paper's makespans, s: E1 by input GB on 100 nodes, E2 by nodes with 50 GB.
PAPER_E1: Final = {
    "random": {50: 51.9, 100: 71.6, 250: 124.7, 500: 219.6},
    "native": {50: 35.1, 100: 46.3, 250: 61.7, 500: 89.4},
    "escher": {50: 35.8, 100: 47.2, 250: 62.1, 500: 90.1},
}
PAPER_E2: Final = {
    "random": {10: 183.3, 50: 113.7, 100: 51.9},
    "native": {10: 54.7, 50: 44.0, 100: 35.1},
    "escher": {10: 55.2, 50: 44.7, 100: 35.8},
}
PAPER_NODES: Final = 100
INPUTS_GB: Final = (50, 100, 250, 500)
E2_INPUT_GB: Final = 50
NODES: Final = 100
E2_SIZES: Final = (10, 50, 100)
QUICK_NODES: Final = 20  # E1's; E1 and E2 share a cluster, of the largest job's nodes
QUICK_INPUTS_GB: Final = (50, 500)
QUICK_E2_SIZES: Final = (10, 20)
NODE_CPU: Final = "4"
_RUN: Final = "e1"
_CREATORS: Final = 16
_DEADLINE: Final = 600.0


@dataclass(frozen=True)
class Model:
    """A map task's run time in the paper's seconds, and how much faster kwok runs it."""

    t0: float = 32.0
    process_s_per_gb: float = 11.6
    fetch_s_per_gb: float = 25.9
    scale: float = 10.0

    def paper_seconds(self, chunk_gb: float, local: bool) -> float:
        fetch = 0.0 if local else chunk_gb * self.fetch_s_per_gb
        return self.t0 + chunk_gb * self.process_s_per_gb + fetch

    def kwok_seconds(self, chunk_gb: float, local: bool) -> float:
        return self.paper_seconds(chunk_gb, local) / self.scale


MODEL: Final = Model()


def e1_points(nodes: int, inputs_gb: Sequence[int]) -> dict[str, tuple[int, float]]:
    """E1's jobs by input GB: every node, chunks of input / 100 GB."""
    return {str(gb): (nodes, gb / PAPER_NODES) for gb in inputs_gb}


def e2_points(sizes: Sequence[int]) -> dict[str, tuple[int, float]]:
    """E2's jobs by cluster size n: the 50 GB input over n chunks."""
    return {str(n): (n, E2_INPUT_GB / n) for n in sizes}


def run(
    mode: str,
    nodes: int,
    jobs: Mapping[str, Mapping[str, tuple[int, float]]],
    seed: int,
    rep: int,
) -> dict[str, Any]:
    """Mode `mode`'s rows on a fresh cluster of `nodes` nodes (the first row rotating by
    repetition), for each experiment of `jobs` one job per point (x: its nodes and chunk
    GB): {experiment: {row: {x: figures}}}."""
    footing = approaches.Footing(nodes=nodes, node_cpu=NODE_CPU, node_memory="16Gi")
    out: dict[str, Any] = {e: {} for e in jobs}
    with tempfile.TemporaryDirectory(prefix=f"escher-paper-e1-{mode}-") as tmp:
        info = localcluster.up(approaches.cluster_spec(mode, Path(tmp) / "c", footing))
        try:
            assert info.extender_url is not None, f"mode {mode} serves no policy API"
            with PolicyClient(info.extender_url, info.token, timeout=120) as policy:
                ctx = Context(info, api_client(info.kubeconfig), policy, random.Random(seed), rep)
                for row in order(list(ROWS[mode]), rep):
                    job(dataclasses.replace(ctx, rep=0), row, 2, 0.01)  # warm-up, not counted
                    for e, points in jobs.items():
                        out[e][row] = {x: job(ctx, row, n, gb) for x, (n, gb) in points.items()}
        finally:
            localcluster.down(info.dir)
    return out


def job(ctx: Context, row: str, n: int, chunk_gb: float) -> dict[str, Any]:
    """One WordCount job of row `row` over the first `n` nodes, chunks of `chunk_gb`."""
    nodes = sorted(ctx.info.nodes)[:n]
    tag = f"e1-{ctx.rep}-{row}-{n}-{round(chunk_gb * 1000)}"
    chunk = {f"{tag}-{i}": node for i, node in enumerate(nodes)}  # task -> its chunk's node
    data = {f"data-{t}": node for t, node in chunk.items()}
    if row in ("pure", "extender"):
        resources.spread(ctx, data, 1, _CREATORS)
    work = Workload(ctx.api)
    core = client.CoreV1Api(ctx.api)
    patcher = ThreadPoolExecutor(8)

    def bound(name: str, node: str) -> None:
        seconds = MODEL.kwok_seconds(chunk_gb, node == chunk[name])
        patch = {"metadata": {"annotations": {RUN_TIME_ANNOTATION: format_run_time(seconds)}}}
        patcher.submit(core.patch_namespaced_pod, name, work.namespace, patch)

    watch = Succeeded(work, set(chunk), _DEADLINE, on_bound=bound)
    time.sleep(1.0)  # the watch lists before the first pod exists
    pods = [_pod(ctx, row, name, node, nodes) for name, node in chunk.items()]
    try:
        t0 = time.monotonic()
        with ThreadPoolExecutor(_CREATORS) as pool:
            list(pool.map(work.create, pods))
        watch.thread.join()
        patcher.shutdown(wait=True)
        r = figures(watch, chunk, t0, chunk_gb)
        ctx.progress(
            f"E1/E2 {row} on {n} nodes, chunks of {chunk_gb:g} GB: {r['local_share']:.0%} "
            f"local, makespan {r['makespan_s']} s (x{MODEL.scale:g}: {r['model_makespan_s']})"
        )
        return r
    finally:
        patcher.shutdown(wait=False)
        ctx.delete_pods(_RUN)
        if row in ("pure", "extender"):
            resources.remove(ctx, list(data), _CREATORS)


def _pod(ctx: Context, row: str, name: str, node: str, nodes: Sequence[str]) -> dict[str, Any]:
    """Task `name` whose chunk is on `node`, placed as row `row` places it."""
    limits = {ctx.resource(f"data-{name}"): "1"} if row in ("pure", "extender") else None
    p = pod_manifest(
        name,
        limits=limits,
        requests={"cpu": "1", "memory": "1Gi"},
        labels={LABEL: _RUN},
        scheduler_name=ctx.info.scheduler_name,
    )
    target = {"native": node, "random": ctx.rng.choice(list(nodes))}.get(row)
    if target is not None:
        term = {"key": "kubernetes.io/hostname", "operator": "In", "values": [target]}
        p["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [term]}]
                }
            }
        }
    return p


def figures(
    watch: Succeeded, chunk: Mapping[str, str], t0: float, chunk_gb: float
) -> dict[str, Any]:
    """A job's figures: the share of tasks bound on their chunk's node (measured), the
    makespan (measured; and times the model's scale), the last bind, and the model's ideal
    (every task local, no scheduling time)."""
    done = [p.phases["Succeeded"] for p in watch.progress.values() if "Succeeded" in p.phases]
    bound = [p.bound for p in watch.progress.values() if p.bound is not None]
    local = sum(1 for name, node in watch.nodes.items() if chunk.get(name) == node)
    complete = len(done) == len(chunk)
    makespan = max(done) - t0 if complete else None
    return {
        "tasks": len(chunk),
        "chunk_gb": chunk_gb,
        "tasks_bound": len(bound),
        "tasks_succeeded": len(done),
        "local_share": local / len(chunk),
        "makespan_s": round(makespan, 3) if makespan is not None else None,
        "model_makespan_s": round(makespan * MODEL.scale, 2) if makespan is not None else None,
        "last_bound_s": round(max(bound) - t0, 3) if bound else None,
        "model_ideal_s": round(MODEL.paper_seconds(chunk_gb, True), 2),
    }
