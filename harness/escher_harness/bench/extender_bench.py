"""`escher-extender bench extender --out DIR`: the extender's performance, in one run.

Part 1 (escher_harness.bench.latency): server-side latency of filter and prioritize at each cluster
size, with node names (nodeCacheCapable) and with full NodeLists. Part 2
(escher_harness.bench.throughput): kube-scheduler's pods/s on the local control plane with the
extender and without it (pure mode), and their ratio. Writes DIR/results.json,
DIR/latency.png and DIR/throughput.png, and prints the tables. Called by extender.cli.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from escher_harness.bench import latency, throughput

# Aims from the issue: filter p99 under 2 ms at 1,000 nodes with node names, and throughput
# with the extender at least 80% of without.
AIM_FILTER_P99_MS = 2.0
AIM_RATIO = 0.8


def _progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _plots(out: Path, samples: dict[str, list[float]], tput: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, verb in zip(axes, ("filter", "prioritize"), strict=True):
        for key, sample in sorted(samples.items()):
            v, n, mode = key.split("/")
            if v != verb:
                continue
            xs = sorted(sample)
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            ax.plot(
                xs, ys, label=f"{n} nodes, {mode}", linestyle="-" if mode == "NodeNames" else "--"
            )
        ax.set_xscale("log")
        ax.set_xlabel("server-side latency (ms, log scale)")
        ax.set_title(f"{verb}: latency CDF")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("fraction of calls")
    fig.tight_layout()
    fig.savefig(out / "latency.png", dpi=120)
    plt.close(fig)

    modes = tput["modes"]
    fig, ax = plt.subplots(figsize=(5, 4))
    names = list(modes)
    ax.bar(names, [modes[m]["pods_per_s"] for m in names], color=["tab:blue", "tab:orange"])
    ax.set_ylabel("pods/s")
    ax.set_title(
        f"kube-scheduler throughput, {modes[names[0]]['pods']} pods on "
        f"{modes[names[0]]['nodes']} nodes\nratio extender/pure = "
        f"{tput['ratio_extender_to_pure']}"
    )
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=120)
    plt.close(fig)


def run(
    out: Path,
    sizes: Sequence[int] = (100, 1000, 5000),
    seconds: float = 10.0,
    tput_nodes: int = 100,
    tput_pods: int = 500,
) -> int:
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    lat_rows, samples = latency.run(list(sizes), seconds, out, _progress)
    tput = throughput.run(tput_nodes, tput_pods, out, _progress)
    filter_1000 = [
        r
        for r in lat_rows
        if r["verb"] == "filter" and r["nodes"] == 1000 and r["node_cache_capable"]
    ]
    results = {
        "benchmark": "extender",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "duration_s": round(time.time() - started, 1),
        "machine": {"python": platform.python_version(), "cpus": _cpus()},
        "parameters": {
            "sizes": list(sizes),
            "seconds_per_run": seconds,
            "warmup_calls_dropped": latency.WARMUP,
            "throughput_nodes": tput_nodes,
            "throughput_pods": tput_pods,
        },
        "latency": lat_rows,
        "throughput": tput,
        "aims": {
            "filter_p99_ms_at_1000_nodes_names": (
                filter_1000[0]["server_ms"]["p99"] if filter_1000 else None
            ),
            "filter_p99_aim_ms": AIM_FILTER_P99_MS,
            "throughput_ratio": tput["ratio_extender_to_pure"],
            "throughput_ratio_aim": AIM_RATIO,
        },
    }
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    _plots(out, samples, tput)

    print("\nServer-side latency (ms), one caller, as kube-scheduler calls:")
    print(
        _table(
            ["verb", "nodes", "mode", "body KB", "calls/s", "p50", "p90", "p99", "max"],
            [
                [
                    r["verb"],
                    r["nodes"],
                    "NodeNames" if r["node_cache_capable"] else "NodeList",
                    r["body_bytes"] // 1024,
                    r["calls_per_s"],
                    r["server_ms"]["p50"],
                    r["server_ms"]["p90"],
                    r["server_ms"]["p99"],
                    r["server_ms"]["max"],
                ]
                for r in lat_rows
            ],
        )
    )
    print(f"\nkube-scheduler throughput ({tput_pods} pods, {tput_nodes} nodes):")
    print(
        _table(
            [
                "mode",
                "pods/s",
                "seconds",
                "set_resource ms",
                "bind p50 ms",
                "bind p99 ms",
                "nodes over capacity",
            ],
            [
                [
                    m["mode"],
                    m["pods_per_s"],
                    m["seconds"],
                    m["set_resource_ms"],
                    m["bind_ms_after_set_resource"]["p50"],
                    m["bind_ms_after_set_resource"]["p99"],
                    len(m["nodes_over_capacity"]),
                ]
                for m in tput["modes"].values()
            ],
        )
    )
    print(f"ratio extender/pure: {tput['ratio_extender_to_pure']} (aim >= {AIM_RATIO})")
    print(f"\nwrote {out / 'results.json'}, {out / 'latency.png'}, {out / 'throughput.png'}")
    return 0


def _cpus() -> int:
    import os

    return os.cpu_count() or 0
