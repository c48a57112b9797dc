"""`escher-extender bench scheduler-perf --out DIR`: kube-scheduler's own benchmark harness,
scheduler_perf, run three ways: default kube-scheduler, kube-scheduler with the ESCHER extender
(extender mode), and ESCHER's pure construction.

Builds the test binary first if needed (hack/build-scheduler-perf.sh, cached by its stamp),
then for each repetition runs every workload every way, the ways interleaved (default,
extender, pure; default, extender, pure; ...) so a slow spell of the shared machine does not
fall on one way (escher_harness.bench.schedperf_run runs one). The figure is scheduler_perf's
SchedulingThroughput Average (pods/s, what upstream's thresholds compare), given as the median
over repetitions with min and max; the ratio to default is taken within each repetition and
then summarised the same way. Writes DIR/results.json after every run (an interrupted campaign
keeps what it measured), DIR/report.md and DIR/throughput.png. Called by escher_harness.cli.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from escher_harness.bench import schedperf_run
from escher_harness.bench.schedperf_config import (
    TEST_CASE_NAMES,
    WAYS,
    Way,
    load_test_cases,
    upstream_threshold,
    workload,
)
from escher_harness.bench.stats import spread


@dataclass(frozen=True)
class Config:
    nodes: int = 500
    repeat: int = 3
    test_cases: Sequence[str] = TEST_CASE_NAMES
    ways: Sequence[Way] = WAYS


def _progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(out: Path, cfg: Config) -> int:
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    _progress("building scheduler_perf (a no-op when up to date) ...")
    built = schedperf_run.build(_progress)
    cases = load_test_cases()
    upstream = yaml.safe_load(built.upstream_config.read_text())
    workloads = [workload(cases, tc, cfg.nodes, built.data) for tc in cfg.test_cases]
    results: dict[str, Any] = {
        "benchmark": "scheduler-perf",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count() or 0,
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
            "kubernetes": built.kubernetes,
        },
        "parameters": {
            "nodes": cfg.nodes,
            "repetitions": cfg.repeat,
            "ways": list(cfg.ways),
            "workloads": [
                {
                    "test_case": wl.test_case,
                    "workload": wl.name,
                    "nodes": wl.nodes,
                    "init_pods": wl.init_pods,
                    "measured_pods": wl.measured_pods,
                    "domain": wl.domain,
                    "upstream_threshold_5000_nodes": upstream_threshold(upstream, wl.test_case),
                }
                for wl in workloads
            ],
        },
        "runs": [],
    }
    total = sum(len([w for w in wl.ways if w in cfg.ways]) for wl in workloads) * cfg.repeat
    done = 0
    for rep in range(cfg.repeat):
        for wl in workloads:
            for way in (w for w in wl.ways if w in cfg.ways):
                done += 1
                _progress(
                    f"run {done}/{total}: {wl.label}, {way}, repetition {rep + 1}/{cfg.repeat}"
                )
                r = schedperf_run.run(
                    wl, way, rep, out / "runs" / f"{wl.test_case}-{way}-{rep + 1}", built, _progress
                )
                row = r.to_json()
                results["runs"].append(row)
                value = pods_per_s(row)
                _progress(
                    f"  {'no' if value is None else f'{value:.1f}'} pods/s in {r.seconds:.0f}s"
                )
                _save(out, results)
    results["summary"] = summarize(results["runs"])
    results["duration_s"] = round(time.time() - started, 1)
    _save(out, results)
    report = _report(results)
    (out / "report.md").write_text(report + "\n")
    _plot(out, results["summary"])
    print(report)
    print(f"\nwrote {out}/results.json, report.md and throughput.png", file=sys.stderr)
    return 0


def pods_per_s(row: Mapping[str, Any]) -> float | None:
    """A run's SchedulingThroughput Average; None when scheduler_perf recorded no sample."""
    throughput = row["results"]["throughput"]
    return None if not throughput else float(throughput["Average"])


def summarize(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per workload and way: pods/s over repetitions (median, min, max), and the ratio to
    default taken within each repetition, over repetitions the same way."""
    by: dict[tuple[str, str], dict[int, dict[str, float]]] = {}
    for row in runs:
        value = pods_per_s(row)
        if value is not None:
            key = (row["test_case"], row["workload"])
            by.setdefault(key, {}).setdefault(row["repetition"], {})[row["way"]] = value
    summary = []
    for (test_case, name), reps in by.items():
        for way in WAYS:
            values = [r[way] for r in reps.values() if way in r]
            if not values:
                continue
            ratios = [r[way] / r["default"] for r in reps.values() if way in r and "default" in r]
            summary.append(
                {
                    "test_case": test_case,
                    "workload": name,
                    "way": way,
                    "pods_per_s": spread(values),
                    "ratio_to_default": spread(ratios) if ratios else None,
                }
            )
    return summary


def table(summary: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: pods/s median [min-max] and the ratio to default, per workload and way."""
    lines = [
        "| test case / workload | way | pods/s median [min-max] | n | ratio to default |",
        "|---|---|---|---|---|",
    ]
    for s in summary:
        p, r = s["pods_per_s"], s["ratio_to_default"]
        ratio = "-" if r is None else f"{r['median']:.2f} [{r['min']:.2f}-{r['max']:.2f}]"
        lines.append(
            f"| {s['test_case']}/{s['workload']} | {s['way']} | "
            f"{p['median']:.1f} [{p['min']:.1f}-{p['max']:.1f}] | {p['n']} | {ratio} |"
        )
    return "\n".join(lines)


def _save(out: Path, results: Mapping[str, Any]) -> None:
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")


def _report(results: Mapping[str, Any]) -> str:
    thresholds = ", ".join(
        f"{w['test_case']} {w['upstream_threshold_5000_nodes']} pods/s"
        for w in results["parameters"]["workloads"]
    )
    return "\n\n".join(
        [
            f"# bench scheduler-perf, {results['started']}",
            f"machine: {json.dumps(results['machine'])}",
            f"parameters: {json.dumps(results['parameters'])}",
            "SchedulingThroughput Average (pods/s), median over repetitions with min and max; "
            "ratio to default taken within each repetition:\n" + table(results["summary"]),
            f"Upstream's thresholds (5,000 nodes, upstream's CI machines): {thresholds}.",
        ]
    )


def _plot(out: Path, summary: Sequence[Mapping[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys(f"{s['test_case']}\n{s['workload']}" for s in summary))
    if not groups:
        return
    fig, ax = plt.subplots(figsize=(max(6.0, 3.0 * len(groups)), 4.5))
    width = 0.8 / len(WAYS)
    for j, way in enumerate(WAYS):
        for s in summary:
            if s["way"] != way:
                continue
            p = s["pods_per_s"]
            x = groups.index(f"{s['test_case']}\n{s['workload']}") + (j - 1) * width
            ax.bar(x, p["median"], width, color=f"C{j}",
                   yerr=[[p["median"] - p["min"]], [p["max"] - p["median"]]], capsize=4,
                   label=way if way not in ax.get_legend_handles_labels()[1] else None)  # fmt: skip
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel("pods/s (SchedulingThroughput Average)")
    ax.set_title("scheduler_perf: median bar, min-max whiskers")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=120)
    plt.close(fig)
