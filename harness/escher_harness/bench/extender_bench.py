"""`escher-extender bench extender --out DIR`: is the extender kube-scheduler's bottleneck?

Part 1 (escher_harness.bench.latency): the extender's server-side filter and prioritize
latency at each cluster size, for plain and ephemeral pods, quiet and under background load.
Part 2 (escher_harness.bench.throughput): kube-scheduler's throughput on the real local
control plane in each mode (kube-scheduler alone, pure, extender; `--modes` adds the
extender's variants and dra, the resources as DRA devices), at each size, with the
modes interleaved in every repetition (none, pure, extender; none, pure, extender; ...) so a
slow spell of the shared machine does not fall on one mode: pods/s, CPU per pod per process
and API writes per pod for each pod class (plain, ephemeral, prefer, gang members; which
mode runs which: throughput.kinds); with `--profile`, a py-spy
profile of the extender in the first repetition at each size. In each such run of a mode with
a policy API, once its workloads are done: the set_resource-to-schedulable trials
(escher_harness.bench.wake; `--wake-trials N`, default 5, 0 turns them off). Part 3
(escher_harness.bench.memory): the extender's memory at 5,000 nodes and 50,000 bound pods.
Prints the tables
(extender_summary), the regression guard, and writes DIR/results.json (after every run, so an
interrupted benchmark keeps what it measured), DIR/report.md, DIR/throughput.png,
DIR/cpu.png and DIR/latency.png. Called by escher_harness.cli.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from escher_harness.bench import extender_summary, latency, memory, sampling, throughput
from escher_harness.localcluster.binaries import find_binaries


@dataclass(frozen=True)
class Config:
    sizes: Sequence[int] = (100, 1000, 5000)
    repeat: int = 3
    pods: int = 1000
    modes: Sequence[throughput.Mode] = throughput.MODES
    qps: float = 1000.0
    burst: int = 2000
    latency_seconds: float = 5.0
    latency: bool = True
    throughput: bool = True
    profile: bool = False
    baseline: Path | None = None  # an earlier results.json to guard against
    memory: bool = True  # the extender's RSS with memory_nodes nodes and memory_pods pods
    memory_nodes: int = 5000
    memory_pods: int = 50_000
    # set_resource-to-schedulable trials per throughput run (modes with a policy API), and
    # the pods waiting in each.
    wake_trials: int = 5
    wake_pods: int = 10
    # kube-scheduler's percentageOfNodesToScore: None, each mode as it ships
    # (escher_harness.bench.sampling); a number equalises it for every mode (0: adaptive).
    percentage_of_nodes_to_score: int | None = None


def quick() -> Config:
    """A few minutes: 100 and 1,000 nodes, 300 pods, one repetition, short latency runs."""
    return Config(
        sizes=(100, 1000), repeat=1, pods=300, latency_seconds=2.0, memory=False, wake_trials=3
    )


def _progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(out: Path, cfg: Config) -> int:
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    results: dict[str, Any] = {
        "benchmark": "extender",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "machine": _machine(),
        "parameters": {
            "sizes": list(cfg.sizes),
            "repetitions": cfg.repeat,
            "pods": cfg.pods,
            "modes": list(cfg.modes),
            "client_qps": cfg.qps,
            "client_burst": cfg.burst,
            "percentage_of_nodes_to_score": cfg.percentage_of_nodes_to_score,
            "kwok": False,
            "throughput_window": "10th to 90th percentile bind",
            "latency_seconds": cfg.latency_seconds,
            "latency_warmup_calls_dropped": latency.WARMUP,
            "wake_trials": cfg.wake_trials,
            "wake_pods": cfg.wake_pods,
        },
        "latency": [],
        "throughput": [],
        "wake": [],
    }
    samples: dict[str, list[float]] = {}
    if cfg.latency:
        results["latency"], samples = latency.run(
            list(cfg.sizes), cfg.latency_seconds, out, _progress
        )
        _save(out, results)
    if cfg.throughput:
        _throughput(out, cfg, results)
    if cfg.memory:
        results["memory"] = memory.run(cfg.memory_nodes, cfg.memory_pods, _progress)
        _save(out, results)
    summary = extender_summary.summarize(results["throughput"])
    results["summary"] = summary
    results["wake_summary"] = extender_summary.wake_summary(results["wake"])
    results["duration_s"] = round(time.time() - started, 1)
    baseline = None
    if cfg.baseline is not None:
        baseline = json.loads(cfg.baseline.read_text()).get("summary")
    results["guard"] = extender_summary.guard(summary, baseline)
    _save(out, results)
    report = _report(results)
    (out / "report.md").write_text(report + "\n")
    _plots(out, results, samples)
    print(report)
    print(f"\nwrote {out}/results.json, report.md and the plots", file=sys.stderr)
    return 0


def _throughput(out: Path, cfg: Config, results: dict[str, Any]) -> None:
    for nodes in cfg.sizes:
        for rep in range(cfg.repeat):
            for mode in cfg.modes:
                _progress(f"throughput: {nodes} nodes, repetition {rep + 1}/{cfg.repeat}, {mode}")
                setup = throughput.Setup(
                    nodes=nodes,
                    pods=cfg.pods,
                    qps=cfg.qps,
                    burst=cfg.burst,
                    profile_dir=out / "profiles" if cfg.profile and rep == 0 else None,
                    wake_trials=cfg.wake_trials,
                    wake_pods=cfg.wake_pods,
                    percentage_of_nodes_to_score=cfg.percentage_of_nodes_to_score,
                )
                measured = throughput.run(mode, setup, _progress)
                results["throughput"] += [{"rep": rep, **row} for row in measured.rows]
                results["wake"] += [{"rep": rep, **t} for t in measured.wake]
                _save(out, results)


def _save(out: Path, results: Mapping[str, Any]) -> None:
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")


def _machine() -> dict[str, Any]:
    versions = {}
    binaries = find_binaries(kwok=False)
    for name, path in (
        ("kube-scheduler", binaries.kube_scheduler),
        ("kube-apiserver", binaries.kube_apiserver),
    ):
        done = subprocess.run([str(path), "--version"], capture_output=True, text=True)
        versions[name] = done.stdout.strip()
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count() or 0,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "versions": versions,
    }


def _budgets(parameters: Mapping[str, Any]) -> str:
    """The API budgets, said in words: the extender binds (gang members, or every pod it is
    sent) with its own, so a budget below kube-scheduler's caps binds; in mode dra
    kube-scheduler makes about 7 writes per pod (claims), so its budget matters more."""
    qps, burst = parameters["client_qps"], parameters["client_burst"]
    return (
        f"API budgets, equal for every client: kube-scheduler's clientConnection qps {qps:g} / "
        f"burst {burst}; the extender's (--kube-qps / --kube-burst) qps {qps:g} / burst {burst}; "
        f"mode dra's kube-controller-manager (--kube-api-qps / --kube-api-burst) qps {qps:g} / "
        f"burst {burst}."
    )


def _report(results: Mapping[str, Any]) -> str:
    parts = [
        f"# bench extender, {results['started']}",
        f"machine: {json.dumps(results['machine'])}",
        f"parameters: {json.dumps(results['parameters'])}",
        _budgets(results["parameters"]),
        sampling.sentence(results["parameters"].get("percentage_of_nodes_to_score", 100)),
    ]
    if results["latency"]:
        parts.append(
            "Server-side latency of the verbs, standalone extender (ms; quiet, and loaded by "
            "/metrics scrapes, ESL steps and resource changes):\n"
            + extender_summary.latency_table(results["latency"])
        )
    if results["summary"]:
        parts.append(extender_summary.throughput_tables(results["summary"]))
        parts.append(
            "API writes per scheduled pod by request (median over repetitions), "
            "kube-apiserver's apiserver_request_total over the measured window:\n"
            + extender_summary.writes_table(results["summary"])
        )
        parts.append("\n".join(results["guard"]))
    if results.get("wake_summary"):
        parts.append(
            "set_resource-to-schedulable: pods waiting (unschedulable) for a resource that did "
            "not exist; seconds from the set_resource call to the first and to the last of them "
            "bound, median [min-max] over every trial of every repetition:\n"
            + extender_summary.wake_table(results["wake_summary"])
        )
    if results.get("memory"):
        m = results["memory"]
        parts.append(
            f"The extender's memory (RSS) at {m['nodes']} nodes: {m['rss_mib_nodes_only']} MiB; "
            f"with {m['pods']} bound pods in its ledger {m['rss_mib_with_pods']} MiB "
            f"({m['kib_per_pod']} KiB per pod); after they are deleted "
            f"{m['rss_mib_after_delete']} MiB."
        )
    for row in results["throughput"]:
        if "profile" in row:
            frames = "\n".join(
                f"  {f['self_share']:6.1%} self {f['total_share']:6.1%} total  {f['frame']}"
                for f in row["profile"]["top_frames"]
            )
            parts.append(
                f"py-spy profile of the extender, {row['nodes']} nodes, {row['workload']} "
                f"pods ({row['profile']['file']}):\n{frames}"
            )
    return "\n\n".join(parts)


def _plots(out: Path, results: Mapping[str, Any], samples: Mapping[str, list[float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["throughput"]
    if rows:
        groups = sorted({(r["nodes"], r["workload"]) for r in rows})
        modes = sorted({r["mode"] for r in rows}, key=list(throughput.ALL_MODES).index)
        fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(groups)), 4.5))
        width = 0.8 / len(modes)
        for j, mode in enumerate(modes):
            labelled = False  # the mode's first bar names it (not every group has every mode)
            for i, group in enumerate(groups):
                values = [
                    r["pods_per_s"]
                    for r in rows
                    if (r["nodes"], r["workload"]) == group
                    if r["mode"] == mode
                ]
                if not values:
                    continue
                x = i + (j - (len(modes) - 1) / 2) * width
                values.sort()
                ax.bar(x, values[len(values) // 2], width, color=f"C{j}",
                       label=None if labelled else mode)  # fmt: skip
                labelled = True
                ax.scatter([x] * len(values), values, color="black", s=10, zorder=3)
        ax.set_xticks(range(len(groups)), [f"{n} nodes\n{w}" for n, w in groups])
        ax.set_ylabel("pods/s (10-90% bind window)")
        ax.set_title("kube-scheduler throughput by mode\nmedian bar, each repetition a dot")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "throughput.png", dpi=120)
        plt.close(fig)
        _cpu_plot(out, rows, groups, modes, plt)
    if samples:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
        for ax, verb in zip(axes, ("filter", "prioritize"), strict=True):
            for key, sample in sorted(samples.items()):
                v, n, kind, load = key.split("/")
                if v != verb:
                    continue
                xs = sorted(sample)
                ys = [(i + 1) / len(xs) for i in range(len(xs))]
                ax.plot(xs, ys, label=f"{n} nodes, {kind}, {load}",
                        linestyle="-" if load == "quiet" else "--")  # fmt: skip
            ax.set_xscale("log")
            ax.set_xlabel("server-side latency (ms, log scale)")
            ax.set_title(f"{verb}: latency CDF")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        axes[0].set_ylabel("fraction of calls")
        fig.tight_layout()
        fig.savefig(out / "latency.png", dpi=120)
        plt.close(fig)


def _cpu_plot(
    out: Path,
    rows: Sequence[Mapping[str, Any]],
    groups: Sequence[tuple[int, str]],
    modes: Sequence[str],
    plt: Any,
) -> None:
    components = extender_summary.COMPONENTS
    labels: list[str] = []
    stacks: dict[str, list[float]] = {c: [] for c in components}
    for nodes, workload in groups:
        for mode in modes:
            mine = [
                r for r in rows if (r["nodes"], r["workload"], r["mode"]) == (nodes, workload, mode)
            ]
            if not mine:
                continue
            labels.append(f"{nodes}\n{workload}\n{mode}")
            for c in components:
                values = sorted(r["cpu_ms_per_pod"].get(c, 0.0) for r in mine)
                stacks[c].append(values[len(values) // 2])
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(labels)), 4.5))
    bottom = [0.0] * len(labels)
    for i, c in enumerate(components):
        ax.bar(range(len(labels)), stacks[c], bottom=bottom, color=f"C{i}", label=c)
        bottom = [b + v for b, v in zip(bottom, stacks[c], strict=True)]
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylabel("CPU ms per scheduled pod (median)")
    ax.set_title("Where the CPU goes, per pod")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "cpu.png", dpi=120)
    plt.close(fig)
