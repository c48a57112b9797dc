"""`escher-extender bench gang --out DIR`: gang scheduling, eleven approaches, one replayed trace.

For a preset (escher_harness.bench.presets): generate each scenario's workload trace once
from the seed (escher_harness.bench.scenario) and write it to DIR/workload/; then, for each
repetition, each scenario and each approach (interleaved, the first approach rotating with
the repetition), start a fresh local control plane on the preset's footing, replay the trace
with locust (loadtests/gang_locustfile.py), record CPU and load, stop the cluster, and
compute the run's figures from its event log (escher_harness.bench.trace). Each run is saved
at once as DIR/runs/r<k>/<scenario>/<approach>/run.json, so `--resume` continues a campaign
split across invocations (the workload and footing must be the same). Finally every figure
is given as median [min-max] over repetitions in DIR/results.json and DIR/report.md, with
PNG plots, and the tables are printed. Called by escher_harness.cli (and so by `make demo`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from escher_harness import localcluster
from escher_harness.bench import (
    approaches,
    environment,
    fragmentation,
    gang_plots,
    gang_report,
    scenario,
    topology,
    trace,
)
from escher_harness.bench.apimetrics import difference
from escher_harness.bench.presets import Preset
from escher_harness.bench.replay import SUCCEED_SLACK
from escher_harness.localcluster.cpus import starting_on
from escher_harness.localcluster.paths import REPO_ROOT
from extender.core.names import CPU, MEMORY
from extender.core.quantity import amount

LOCUSTFILE = REPO_ROOT / "loadtests" / "gang_locustfile.py"
# Budget for the load generator's set-up and warm-up, and for its drain beyond the last
# gang's deadline and run time, before a run is declared hung.
_SETUP_BUDGET = 120.0
_DRAIN_BUDGET = SUCCEED_SLACK + 90.0
# A run's per-event series: for the plots, left out of results.json.
_SERIES = ("latencies_ms", "partial_series", "free_domains_series")


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def unavailable(approach: str) -> str | None:
    """Why an approach cannot run here, or None."""
    return approaches.get(approach).unavailable()


def order(which: Sequence[str], rep: int) -> list[str]:
    """The approaches of repetition `rep` (1-based): all of them, the first rotating, so no
    approach always runs first (after a cold machine) or last."""
    k = (rep - 1) % len(which) if which else 0
    return [*which[k:], *which[:k]]


def warmup_gang(
    sc: scenario.Scenario, trace_: Sequence[scenario.GangArrival]
) -> scenario.GangArrival:
    """The uncounted first gang: two members shaped like the trace's first gang, no run time."""
    first = trace_[0]
    return scenario.GangArrival(0.0, "w00000", 2, first.cpu, first.memory, 0.0)


def shapes(preset: Preset, arrivals: Sequence[scenario.GangArrival]) -> dict[str, topology.Shape]:
    """Each gang's topology Shape on the preset's footing ({} without topology labels)."""
    f = preset.footing
    if f.topology is None:
        return {}
    return {
        a.name: topology.Shape(
            f.topology,
            f.nodes,
            topology.members_per_node(a.cpu, a.memory, f.node_cpu, f.node_memory, f.node_pods),
        )
        for a in arrivals
    }


def run_one(
    approach: str,
    preset: Preset,
    sc: scenario.Scenario,
    workload: Path,
    arrivals: Sequence[scenario.GangArrival],
    run_dir: Path,
    label: str,
) -> dict[str, Any]:
    run_dir.mkdir(parents=True, exist_ok=True)
    log, result = run_dir / "log.jsonl", run_dir / "locust-result.json"
    for p in (log, result, Path(f"{result}.error")):
        p.unlink(missing_ok=True)
    log.write_text("")
    warmup = warmup_gang(sc, arrivals)
    by_gang = shapes(preset, [*arrivals, warmup])
    with tempfile.TemporaryDirectory(prefix=f"escher-gang-{approach}-") as tmp:
        spec = approaches.cluster_spec(approach, Path(tmp) / "c", preset.footing)
        info = localcluster.up(spec)
        try:
            info = approaches.get(approach).started(info, preset.footing)
            cfg = {
                "approach": approach,
                "cluster_dir": str(info.dir),
                "workload": str(workload),
                "log": str(log),
                "result": str(result),
                **_replay_config(preset, sc, arrivals, warmup, by_gang),
            }
            budget = _budget(sc, arrivals)
            measured = _measure(info, spec, cfg, len(arrivals), budget, run_dir, label)
        finally:
            # The extender's refusals (a bind refused, a gang that waits) are in its log only.
            environment.keep_logs(info.processes, run_dir / "logs")
            localcluster.down(info.dir)
    error = Path(f"{result}.error")
    if error.exists():
        raise RuntimeError(f"the load generator failed: {error.read_text()[-2000:]}")
    facts = json.loads(result.read_text())
    events = trace.load(log)
    f = trace.figures(events)
    writes = difference(facts["writes_after"], facts["writes_before"])
    total = sum(writes.values())
    return {
        **f.to_json(),
        "latencies_ms": f.latencies_ms,
        "partial_series": f.partial_series,
        "api_writes": total,
        "api_writes_per_gang": round(total / f.gangs_submitted, 1) if f.gangs_submitted else None,
        "writes": writes,
        "warmup": facts.get("warmup"),
        "unfinished_lives": facts.get("unfinished_lives"),
        **measured,
        "overcommits": len(facts.get("overcommits") or []),
        "overcommit_examples": (facts.get("overcommits") or [])[:5],
        "notes": facts.get("notes") or {},
        "topology": sc.topology,
        "placement": topology.run_quality(events, by_gang) if by_gang else {},
        **_free_domains(preset, events),
    }


def _replay_config(
    preset: Preset,
    sc: scenario.Scenario,
    arrivals: Sequence[scenario.GangArrival],
    warmup: scenario.GangArrival,
    by_gang: dict[str, topology.Shape],
) -> dict[str, Any]:
    """What the locustfile replays with, beside its files: the deadlines, the warm-up gang,
    each gang's level and the nodes' capacity."""
    footing = preset.footing
    return {
        "deadline": sc.deadline,
        "attempt_timeout": sc.attempt_timeout,
        "warmup": asdict(warmup),
        # Each gang's level, asked for as sc.topology says (escher_harness.bench.topology)
        "topology": sc.topology,
        "levels": {
            a.name: by_gang[a.name].level(a.size) for a in (*arrivals, warmup) if a.name in by_gang
        },
        # Every node's cpu (milli) and memory (bytes): the over-commit check's.
        "capacity": [
            amount(CPU, footing.node_cpu, field="cpu"),
            amount(MEMORY, footing.node_memory, field="memory"),
        ],
    }


def _budget(sc: scenario.Scenario, arrivals: Sequence[scenario.GangArrival]) -> float:
    """How long the load generator may take before the run is declared hung."""
    return (
        _SETUP_BUDGET
        + max(a.at for a in arrivals)
        + sc.deadline
        + max(a.run_time for a in arrivals)
        + _DRAIN_BUDGET
    )


def _measure(
    info: localcluster.ClusterInfo,
    spec: localcluster.ClusterSpec,
    cfg: dict[str, Any],
    gangs: int,
    budget: float,
    run_dir: Path,
    label: str,
) -> dict[str, Any]:
    """Replay with locust on the running cluster (its gangs, its time budget); the load,
    each process's CPU seconds, the cluster's start-up and the extender's own figures."""
    log = Path(cfg["log"])
    before = {p.name: environment.cpu_seconds(p.pid) for p in info.processes}
    extender = next((p for p in info.processes if p.name == "extender"), None)
    sampler = (
        environment.ExtenderSampler(
            info.extender_url,
            extender,
            cpus=spec.cpu_split.of(extender.name) if spec.cpu_split else None,
        )
        if info.extender_url and extender
        else None
    )
    with environment.LoadSampler() as load, sampler or contextlib.nullcontext():
        cpus = spec.cpu_split.rest if spec.cpu_split else None
        _locust(cfg, log, label, gangs, budget, run_dir / "locust.txt", cpus)
    after = {p.name: environment.cpu_seconds(p.pid) for p in info.processes}
    if info.extender_url:
        _save_metrics(info.extender_url, run_dir / "extender-metrics.txt")
    return {
        "load_average": load.summary(),
        "cpu_seconds": {
            k: round(a - b, 2)
            for k, a in after.items()
            if a is not None and (b := before.get(k)) is not None
        },
        "cluster_ready_s": round(info.ready_seconds, 1),
        "extender": {**sampler.summary(), **_loop_lag(run_dir / "extender-metrics.txt")}
        if sampler
        else None,
    }


def _free_domains(preset: Preset, events: Sequence[trace.Event]) -> dict[str, Any]:
    """Free whole domains over time: only on a footing with topology (absent otherwise)."""
    footing = preset.footing
    if footing.topology is None:
        return {}
    domains = fragmentation.domains(footing.topology, footing.nodes)
    series = fragmentation.free_series(events, footing.topology, domains)
    return {
        "fragmentation": fragmentation.figures(series, domains),
        "free_domains_series": series,
    }


def _loop_lag(metrics: Path) -> dict[str, float]:
    """The extender's longest event-loop lag in the run, the longest its own work accounts
    for, and its longest garbage collection (its own metrics), as far as it said them."""
    text = metrics.read_text() if metrics.exists() else ""
    out: dict[str, float] = {}
    for key, name in (
        ("longest_loop_lag_ms", "escher_event_loop_lag_max_seconds"),
        ("longest_loop_held_ms", "escher_event_loop_held_max_seconds"),
        ("longest_gc_pause_ms", "escher_gc_pause_max_seconds"),
    ):
        found = re.search(rf"^{name} (\S+)$", text, re.M)
        if found:
            out[key] = round(float(found.group(1)) * 1000, 1)
    return out


def _save_metrics(url: str, path: Path) -> None:
    """The extender's /metrics at the end of a run (its per-verb latency histograms), kept
    beside the run for diagnosis."""
    try:
        path.write_text(httpx.get(f"{url}/metrics", timeout=10).text)
    except httpx.HTTPError as e:
        path.write_text(f"# not read: {e}\n")


def _locust(
    cfg: dict[str, Any],
    log: Path,
    label: str,
    gangs: int,
    budget: float,
    output: Path,
    cpus: frozenset[int] | None,
) -> None:
    env = {**os.environ, "ESCHER_GANG_BENCH": json.dumps(cfg)}
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--headless",
        "-u",
        "1",
        "-r",
        "1",
        "--only-summary",
        "--loglevel",
        "WARNING",
        # A gang given up is a result, not an error: only a crash exits non-zero.
        "--exit-code-on-error",
        "0",
    ]
    with output.open("w") as out:
        # The load generator is the API server's client: on the cluster's side of a split.
        with starting_on(cpus):
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        started = time.monotonic()
        try:
            while proc.poll() is None:
                time.sleep(5)
                text = log.read_text()
                counts = {k: text.count(f'"kind": "{k}"') for k in ("submit", "done", "timeout")}
                _say(
                    f"{label}: {time.monotonic() - started:.0f}s, {counts['submit']}/{gangs} "
                    f"gangs submitted, {counts['done']} done, {counts['timeout']} given up"
                )
                if time.monotonic() - started > budget:
                    raise RuntimeError(f"the load generator ran over its {budget:.0f}s budget")
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"locust failed ({proc.returncode}): {output.read_text()[-3000:]}")


def _plan(preset: Preset) -> dict[str, Any]:
    """What a resumed campaign must share with the runs already on disk."""
    fixed = {k: v for k, v in asdict(preset).items() if k != "repeat"}
    return {
        "preset": fixed,
        "digests": {
            s.name: scenario.digest(scenario.generate(s, preset.seed)) for s in preset.scenarios
        },
    }


def run(
    out: Path,
    preset: Preset,
    which: Sequence[str] = approaches.APPROACHES,
    resume: bool = False,
    command: str = "",
) -> int:
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    plan = _plan(preset)
    plan_file = out / "plan.json"
    if resume and plan_file.exists():
        old = json.loads(plan_file.read_text())
        if old != json.loads(json.dumps(plan)):
            raise RuntimeError(
                f"--resume: {out} holds runs of another workload or footing; use a new --out"
            )
    elif (out / "runs").exists() and not resume:
        raise RuntimeError(
            f"{out} already holds runs: pass --resume to add to them, or a new --out"
        )
    plan_file.write_text(json.dumps(plan, indent=1) + "\n")

    workloads: dict[str, Any] = {}
    for sc in preset.scenarios:
        arrivals = scenario.generate(sc, preset.seed)
        path = out / "workload" / f"{sc.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(scenario.to_json(arrivals)) + "\n")
        workloads[sc.name] = {
            "scenario": asdict(sc),
            "digest": scenario.digest(arrivals),
            "arrivals": scenario.to_json(arrivals),
            "offered_cpu": round(sc.offered_cpu(), 1),
            "capacity_cpu": preset.capacity_cpu(),
            "file": str(path),
        }
        digest = workloads[sc.name]["digest"]
        _say(f"workload {sc.name}: {len(arrivals)} gangs, seed {preset.seed}, trace {digest}")
    _say(f"preset {preset.name}: {preset.describe()}")

    skipped = {a: why for a in which if (why := unavailable(a))}
    for a, why in skipped.items():
        _say(f"{a}: skipped: {why}")
    runnable = [a for a in which if a not in skipped]
    total = preset.repeat * len(preset.scenarios) * len(runnable)
    done = 0
    for rep in range(1, preset.repeat + 1):
        for sc in preset.scenarios:
            arrivals = scenario.from_json(workloads[sc.name]["arrivals"])
            for approach in order(runnable, rep):
                done += 1
                run_dir = out / "runs" / f"r{rep}" / sc.name / approach
                saved = run_dir / "run.json"
                if resume and saved.exists():
                    continue
                label = f"[{done}/{total}] r{rep} {sc.name} {approach}"
                _say(f"{label}: starting a fresh control plane")
                try:
                    result = run_one(
                        approach,
                        preset,
                        sc,
                        Path(workloads[sc.name]["file"]),
                        arrivals,
                        run_dir,
                        label,
                    )
                except (localcluster.ClusterError, RuntimeError) as e:
                    _say(f"{label}: failed: {e}")
                    result = {"error": str(e)}
                saved.write_text(json.dumps(result) + "\n")
    return _finish(out, preset, which, runnable, skipped, workloads, started, command)


def load_runs(
    out: Path, repeat: int, scenarios: Sequence[str], which: Sequence[str]
) -> dict[str, dict[str, dict[int, dict[str, Any]]]]:
    """The recorded runs on disk: runs[scenario][approach][rep]."""
    runs: dict[str, dict[str, dict[int, dict[str, Any]]]] = {}
    for sc in scenarios:
        for a in which:
            for rep in range(1, repeat + 1):
                p = out / "runs" / f"r{rep}" / sc / a / "run.json"
                if p.exists():
                    runs.setdefault(sc, {}).setdefault(a, {})[rep] = json.loads(p.read_text())
    return runs


def _finish(
    out: Path,
    preset: Preset,
    which: Sequence[str],
    runnable: Sequence[str],
    skipped: dict[str, str],
    workloads: dict[str, Any],
    started: float,
    command: str,
) -> int:
    names = [s.name for s in preset.scenarios]
    runs = load_runs(out, preset.repeat, names, runnable)
    loc = approaches.policy_loc()
    results: dict[str, Any] = {}
    for a in which:
        if a in skipped:
            results[a] = {"skipped": skipped[a], "policy_loc": loc.get(a)}
            continue
        per = {}
        for sc in names:
            reps = runs.get(sc, {}).get(a, {})
            per[sc] = {
                "figures": gang_report.aggregate(list(reps.values())),
                "errors": [r["error"] for r in reps.values() if "error" in r],
                "repetitions": {
                    str(k): {x: v for x, v in r.items() if x not in _SERIES}
                    for k, r in sorted(reps.items())
                },
            }
        results[a] = {"policy_loc": loc.get(a), "scenarios": per}
    ts = gang_report.targets(runs)
    doc = {
        "command": command or "escher-extender bench gang",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "duration_s": round(time.time() - started, 1),
        "preset": asdict(preset),
        "repetitions": preset.repeat,
        "order": {str(r): order(runnable, r) for r in range(1, preset.repeat + 1)},
        "workloads": workloads,
        "environment": {"versions": environment.versions(), "machine": environment.machine()},
        "approaches": results,
        "targets": [asdict(t) for t in ts],
    }
    tables = {
        "outcome": gang_report.table(results, names, gang_report.OUTCOME_TABLE),
        "cost": gang_report.table(results, names, gang_report.COST_TABLE, loc),
        "run": gang_report.table(results, names, gang_report.RUN_TABLE),
    }
    if preset.footing.topology is not None:
        tables["topology"] = gang_report.table(results, names, gang_report.TOPOLOGY_TABLE)
        tables["fragmentation"] = gang_report.table(results, names, gang_report.FRAGMENTATION_TABLE)
        doc["domains"] = fragmentation.domains(preset.footing.topology, preset.footing.nodes)
    (out / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "report.md").write_text(gang_report.report_md(doc, tables, ts))
    gang_plots.write(out, runs, names, runnable)
    for sc, w in workloads.items():
        print(f"{sc}: {len(w['arrivals'])} gangs, seed {preset.seed}, trace {w['digest']}")
    print(f"repetitions: {preset.repeat} (cells: median [min-max])\n")
    print(tables["outcome"], "\n", tables["cost"], sep="\n")
    if "topology" in tables:
        print("\n" + tables["topology"], "\nfree whole domains, % of all:", sep="\n")
        print(tables["fragmentation"])
        for note in gang_report.notes(results):
            print(f"note: {note}")
    print("\n" + gang_report.targets_md(ts))
    print(f"\nwrote {out / 'results.json'}, {out / 'report.md'} and plots in {out}")
    return 0
