"""`escher-extender bench gang-timeline --out DIR`: where one gang's time goes.

One gang at a time on an idle cluster (no contention, no queue), for the extender and the
in-framework peers, so each figure is a gang's own critical path. For every gang, times are
taken from one clock (the machine's wall clock) relative to `t0`, the moment the load
generator starts submitting it:

- created: the last member first seen by the pod watch (the approach's own objects, such as
  PodGroups, are created before the pods and count here);
- reserved: the extender reserved a place for every member (its `gang bound` log line);
- filtered: every member passed the extender's filter to its reserved place;
- at bind: every member reached the extender's bind barrier, which opens then;
- bindings: the extender created the last member's Binding;
- bound: the last member first seen bound by the pod watch (the gang's latency).

The peers have only created and bound: their middle is inside kube-scheduler. Approaches run
interleaved over repetitions, each on a fresh cluster of the gang benchmark's footing, after
one uncounted warm-up gang. Writes DIR/results.json and DIR/report.md and prints the table.
Called by escher_harness.cli.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from escher_harness import localcluster
from escher_harness.bench import approaches
from escher_harness.bench.approaches.registry import TIMELINE
from escher_harness.bench.gang_bench import order
from escher_harness.bench.recorder import Recorder
from escher_harness.bench.scenario import GangArrival
from escher_harness.bench.stats import spread
from escher_harness.kubeclient import api_client

APPROACHES = TIMELINE
# The extender's timeline marks, in the order they happen, after `created`.
MARKS = ("reserved", "filtered", "ready", "bindings")
LABELS = {
    "created": "last member created",
    "reserved": "gang reserved",
    "filtered": "all members filtered",
    "ready": "all members at bind",
    "bindings": "last Binding created",
    "bound": "last member seen bound",
}


class _Watch(Recorder):
    """The benchmark's pod watch, also noting when each pod is first seen (created)."""

    def __init__(self, api: Any) -> None:
        super().__init__(api, (), lambda e: None)
        self.first_seen: dict[str, float] = {}
        self.bound_at: dict[str, float] = {}

    def observe(self, pod: Mapping[str, Any], deleted: bool) -> None:
        name = pod["metadata"]["name"]
        now = self.clock()
        if not deleted:
            self.first_seen.setdefault(name, now)
            if (pod.get("spec") or {}).get("nodeName"):
                self.bound_at.setdefault(name, now)
        super().observe(pod, deleted)


def extender_marks(log: Path) -> dict[str, dict[str, float]]:
    """The extender's `gang bound` lines: gang name -> reserved/ready/bindings wall times."""
    out: dict[str, dict[str, float]] = {}
    for text in log.read_text(errors="replace").splitlines():
        if '"gang bound"' not in text:
            continue
        rec = json.loads(text)
        if rec.get("reserved_at") is None or rec.get("ready_at") is None:
            continue  # bound before this process reserved it (a restart): no timeline
        name = str(rec["gang"]).split("/", 1)[-1]
        out[name] = {
            "reserved": rec["reserved_at"],
            **({"filtered": rec["filtered_at"]} if rec.get("filtered_at") else {}),
            "ready": rec["ready_at"],
            "bindings": rec["bound_at"],
        }
    return out


def timeline(
    t0: float,
    pods: Sequence[str],
    first_seen: Mapping[str, float],
    bound_at: Mapping[str, float],
    marks: Mapping[str, float] | None,
) -> dict[str, float]:
    """One gang's marks in milliseconds after t0."""
    row = {
        "created": max(first_seen[p] for p in pods),
        **(marks or {}),
        "bound": max(bound_at[p] for p in pods),
    }
    return {k: round((v - t0) * 1000, 1) for k, v in row.items()}


def run_approach(
    approach: str, gangs: int, size: int, footing: approaches.Footing
) -> list[dict[str, float]]:
    """`gangs` gangs of `size` one after another on a fresh cluster: each one's timeline."""
    with tempfile.TemporaryDirectory(prefix=f"escher-timeline-{approach}-") as tmp:
        info = localcluster.up(approaches.cluster_spec(approach, Path(tmp) / "c", footing))
        try:
            api = api_client(info.kubeconfig, pool_size=16)
            watch = _Watch(api)
            stop = threading.Event()
            thread = threading.Thread(target=watch.run, args=(stop,), daemon=True)
            thread.start()
            if not watch.synced.wait(30):
                raise RuntimeError("the pod watch did not list within 30 s")
            env = approaches.Env(info, api, watch, lambda kind, gang: None)
            starts: dict[str, float] = {}
            members: dict[str, tuple[str, ...]] = {}
            for i in range(gangs + 1):  # g00000 is the warm-up
                job = approaches.GangJob(
                    GangArrival(0.0, f"g{i:05d}", size, "1", "1Gi", 0.0), 30.0, 5.0
                )
                starts[job.name] = time.time()
                if not approaches.submit(approach, env, job):
                    raise RuntimeError(f"{approach}: gang {job.name} was not bound within 30 s")
                members[job.name] = pods = env.pods[job.name]
                approaches.delete(approach, env, job)
                if not watch.gone(pods, 30):
                    raise RuntimeError(f"{approach}: gang {job.name}'s pods were not deleted")
            stop.set()
            thread.join(10)
            marks = extender_marks(info.dir / "logs" / "extender.log") if info.extender_url else {}
        finally:
            localcluster.down(info.dir)
    return [
        timeline(starts[n], members[n], watch.first_seen, watch.bound_at, marks.get(n))
        for n in sorted(starts)[1:]  # the first is the warm-up
    ]


def summarise(runs: Mapping[str, Sequence[Sequence[Mapping[str, float]]]]) -> dict[str, Any]:
    """Per approach and mark: the median over each repetition's gangs, then median
    [min-max] of those over repetitions."""
    out: dict[str, Any] = {}
    for approach, reps in runs.items():
        keys = [k for k in ("created", *MARKS, "bound") if all(k in g for r in reps for g in r)]
        out[approach] = {
            k: spread([statistics.median(g[k] for g in rep) for rep in reps]) for k in keys
        }
    return out


def table(summary: Mapping[str, Any]) -> str:
    cols = [a for a in APPROACHES if a in summary]
    lines = [
        "| mark (ms after the first create call) | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for k in ("created", *MARKS, "bound"):
        cells = []
        for a in cols:
            s = summary[a].get(k)
            cells.append("-" if s is None else f"{s['median']:.1f} [{s['min']:.1f}-{s['max']:.1f}]")
        lines.append(f"| {LABELS[k]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(
    out: Path,
    *,
    which: Sequence[str] = APPROACHES,
    gangs: int = 20,
    size: int = 4,
    repeat: int = 3,
    nodes: int = 8,
) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    footing = approaches.Footing(nodes=nodes, node_cpu="8", node_memory="32Gi")
    runs: dict[str, list[list[dict[str, float]]]] = {a: [] for a in which}
    for rep in range(1, repeat + 1):
        for approach in order(list(which), rep):
            print(
                f"[{time.strftime('%H:%M:%S')}] repetition {rep}/{repeat}: {approach}, "
                f"{gangs} gangs of {size}",
                file=sys.stderr,
                flush=True,
            )
            runs[approach].append(run_approach(approach, gangs, size, footing))
    summary = summarise(runs)
    result = {
        "gangs": gangs,
        "size": size,
        "repeat": repeat,
        "nodes": nodes,
        "summary": summary,
        "runs": runs,
    }
    (out / "results.json").write_text(json.dumps(result, indent=2))
    text = (
        f"# One gang at a time: where its time goes\n\n{gangs} gangs of {size} members "
        f"(1 cpu each) on {nodes} idle nodes, one after another, per approach and "
        f"repetition; median over the gangs, then median [min-max] over {repeat} "
        "repetitions.\n\n" + table(summary) + "\n"
    )
    (out / "report.md").write_text(text)
    print(text)
    return result
