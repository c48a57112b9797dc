"""The campaign of `escher-extender bench scheduling-perf --out DIR`.

For each repetition, each scenario and each approach (interleaved, the first approach
rotating with the repetition, as escher_harness.bench.gang_bench orders them): a fresh local
control plane on the project's node shape with kube-apiserver's audit log on, the scenario's
jobs created at the project's rates (submit), a wait until every pod is bound (or bindings
stop for `stall` seconds once all are created, or `timeout` passes), then the audit log read
(audit) and the cluster stopped. API writes (kube-apiserver's /metrics) and each process's
CPU seconds are taken around the submission. Each run is saved at once as
DIR/runs/r<k>/<scenario>/<approach>/run.json; then DIR/results.json, DIR/report.md and the
plots (report). Called by escher_harness.cli.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from escher_harness import localcluster
from escher_harness.bench import apimetrics, approaches, environment
from escher_harness.bench.gang_bench import order
from escher_harness.bench.kubeschedperf import audit, report, shapes, submit
from escher_harness.kubeclient import api_client
from escher_harness.localcluster.clusterdir import ClusterDir

DEFAULT_APPROACHES = ("extender", "native", "coscheduling")
STARTUP = 600.0  # seconds for a cluster's start-up


@dataclass(frozen=True)
class Config:
    scenarios: tuple[shapes.Scenario, ...] = shapes.SCENARIOS
    approaches: tuple[str, ...] = DEFAULT_APPROACHES
    repeat: int = 3
    nodes: int = shapes.NODES
    pods: int = shapes.PODS
    stall: float = 120.0  # seconds without a binding, all pods created, before giving up
    timeout: float = 1800.0  # seconds for one run's submission and scheduling

    def describe(self) -> str:
        return (
            f"{self.nodes} nodes of {shapes.NODE_CPU} cpu, {shapes.NODE_MEMORY}, "
            f"{shapes.NODE_PODS} pods; {self.pods} pods of {shapes.POD_CPU} cpu, "
            f"{shapes.POD_MEMORY} per scenario; {self.repeat} repetitions"
        )


def quick() -> Config:
    """A few minutes: 50 nodes, 500 pods, one repetition."""
    return Config(repeat=1, nodes=50, pods=500)


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Progress:
    """Pods created (told by the creator) and bound (counted in the audit log's new lines)."""

    def __init__(self, log: Path) -> None:
        self.log, self.offset = log, 0
        self.created = self.bound = 0
        self.last_bind = time.monotonic()

    def tell(self, created: int) -> None:
        self.created = created

    def poll(self) -> int:
        with self.log.open("rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1  # a line half written is read next time
        self.offset += end
        new = audit.count_bindings(chunk[:end].decode(errors="replace"))
        if new:
            self.bound += new
            self.last_bind = time.monotonic()
        return self.bound


def _submit_and_wait(
    approach: str, info: localcluster.ClusterInfo, sc: shapes.Scenario, cfg: Config, label: str
) -> dict[str, Any]:
    """Create the scenario's pods and wait for them bound: why it stopped, and the CPU
    seconds and API writes it took."""
    api = api_client(info.kubeconfig, pool_size=submit.WORKERS + 4)
    progress = Progress(ClusterDir(info.dir).audit_log)
    failed: list[BaseException] = []

    def creator() -> None:
        try:
            submit.create(api, sc, submit.job_maker(approach, info, api, sc.gang), progress.tell)
        except Exception as e:  # said in the run's result
            failed.append(e)

    cpu_before = {p.name: environment.cpu_seconds(p.pid) for p in info.processes}
    writes_before = apimetrics.write_counts(api)
    started = time.monotonic()
    thread = threading.Thread(target=creator, name="ksp-creator", daemon=True)
    with environment.LoadSampler() as load:
        thread.start()
        stopped = _wait(progress, thread, sc.pods, cfg, started, label)
        thread.join(cfg.timeout)
    cpu_after = {p.name: environment.cpu_seconds(p.pid) for p in info.processes}
    writes = apimetrics.difference(apimetrics.write_counts(api), writes_before)
    return {
        "stopped": f"creating failed: {failed[0]}" if failed else stopped,
        "cpu_seconds": {
            k: round(a - b, 2)
            for k, a in cpu_after.items()
            if a is not None and (b := cpu_before.get(k)) is not None
        },
        "writes": writes,
        "load_average": load.summary(),
    }


def _wait(
    progress: Progress,
    creator: threading.Thread,
    pods: int,
    cfg: Config,
    started: float,
    label: str,
) -> str:
    said = 0.0
    while True:
        time.sleep(1.0)  # the audit log is read in whole seconds: no finer wait is needed
        bound, now = progress.poll(), time.monotonic()
        if now - said >= 10:
            say(f"{label}: {now - started:.0f}s, {progress.created}/{pods} created, {bound} bound")
            said = now
        if bound >= pods:
            return "all bound"
        if not creator.is_alive() and now - progress.last_bind > cfg.stall:
            return f"no binding for {cfg.stall:.0f}s with {bound}/{pods} bound"
        if now - started > cfg.timeout:
            return f"timeout {cfg.timeout:.0f}s with {bound}/{pods} bound"


def run_one(
    approach: str, sc: shapes.Scenario, cfg: Config, run_dir: Path, label: str
) -> dict[str, Any]:
    """One run on a fresh cluster: its figures, from the audit log and around it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    footing = approaches.Footing(
        nodes=cfg.nodes,
        node_cpu=shapes.NODE_CPU,
        node_memory=shapes.NODE_MEMORY,
        node_pods=shapes.NODE_PODS,
    )
    with tempfile.TemporaryDirectory(prefix=f"escher-ksp-{approach}-") as tmp:
        spec = approaches.cluster_spec(approach, Path(tmp) / "c", footing)
        # A shared, loaded machine can take longer than the usual start-up budget.
        spec = dataclasses.replace(spec, audit_log=True, timeout=max(spec.timeout, STARTUP))
        info = localcluster.up(spec)
        try:
            measured = _submit_and_wait(approach, info, sc, cfg, label)
            times = audit.read_file(ClusterDir(info.dir).audit_log)
        finally:
            environment.keep_logs(info.processes, run_dir / "logs")
            localcluster.down(info.dir)
    return {
        "scenario": dataclasses.asdict(sc),
        "cluster_ready_s": round(info.ready_seconds, 1),
        **measured,
        **_figures(times, sc, cfg.nodes),
    }


def _figures(times: audit.PodTimes, sc: shapes.Scenario, nodes: int) -> dict[str, Any]:
    f = audit.figures(times, sc.pods)
    room = min(int(shapes.NODE_CPU), int(shapes.NODE_MEMORY.removesuffix("Gi")), shapes.NODE_PODS)
    over = audit.over_capacity(times, room)
    partly = (
        audit.partly_bound_gangs(times, dict.fromkeys(submit.job_names(sc.jobs), sc.size))
        if sc.gang and sc.size > 1
        else None
    )
    start = min(times.created.values(), default=0.0)
    return {
        **f,
        "nodes_used": len({node for _, node in times.bound.values()}),
        "nodes_over_capacity": len(over),
        "over_capacity_examples": dict(list(over.items())[:5]),
        "partly_bound_gangs": None if partly is None else len(partly),
        "partly_bound_examples": (partly or [])[:5],
        "series": audit.series(times, start),
    }


def run(out: Path, cfg: Config, command: str = "") -> int:
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    scaled = [sc.scaled(cfg.pods) for sc in cfg.scenarios]
    say(f"scheduling-perf: {cfg.describe()}")
    total = cfg.repeat * len(scaled) * len(cfg.approaches)
    done = 0
    skipped: dict[str, dict[str, str]] = {}
    for rep in range(1, cfg.repeat + 1):
        for canonical, sc in zip(cfg.scenarios, scaled, strict=True):
            for approach in order(list(cfg.approaches), rep):
                done += 1
                if why := submit.unsupported(approach, sc.gang):
                    skipped.setdefault(canonical.name, {})[approach] = why
                    continue
                label = f"[{done}/{total}] r{rep} {canonical.name} {approach}"
                say(f"{label}: {sc.jobs} jobs of {sc.size} on a fresh control plane")
                run_dir = out / "runs" / f"r{rep}" / canonical.name / approach
                try:
                    result = run_one(approach, sc, cfg, run_dir, label)
                except (localcluster.ClusterError, RuntimeError) as e:
                    say(f"{label}: failed: {e}")
                    result = {"error": str(e)}
                (run_dir / "run.json").write_text(json.dumps(result) + "\n")
                say(f"{label}: {result.get('stopped', result.get('error'))}")
    return _finish(out, cfg, skipped, started, command)


def load_runs(out: Path, cfg: Config) -> report.Runs:
    runs: report.Runs = {}
    for sc in cfg.scenarios:
        for a in cfg.approaches:
            for rep in range(1, cfg.repeat + 1):
                p = out / "runs" / f"r{rep}" / sc.name / a / "run.json"
                if p.exists():
                    runs.setdefault(sc.name, {}).setdefault(a, {})[rep] = json.loads(p.read_text())
    return runs


def _finish(
    out: Path, cfg: Config, skipped: dict[str, dict[str, str]], started: float, command: str
) -> int:
    runs = load_runs(out, cfg)
    names: Sequence[str] = [sc.name for sc in cfg.scenarios]
    doc = {
        "command": command or "escher-extender bench scheduling-perf",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "duration_s": round(time.time() - started, 1),
        "config": {**dataclasses.asdict(cfg), "describe": cfg.describe()},
        "environment": {"versions": environment.versions(), "machine": environment.machine()},
        "skipped": skipped,
        "results": report.aggregate(runs),
    }
    (out / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
    text = report.markdown(doc, runs, names, cfg.approaches)
    (out / "report.md").write_text(text)
    report.plots(out, runs, cfg.scenarios, cfg.approaches)
    print(text)
    print(f"wrote {out / 'results.json'}, {out / 'report.md'} and plots in {out}")
    return 0
