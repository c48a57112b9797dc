"""The gang benchmark's plots, every repetition shown: latency CDFs (a line per repetition,
one colour per approach, its registry row's), partially bound gangs over time, and
completions per approach (median with min-max bars, each repetition a dot), and with
topology placement quality (the same bars for gangs inside one domain, the largest-domain
share and domains spanned over the minimum) and free whole blocks and racks over time (a
line per repetition). Written as PNG beside report.md by escher_harness.bench.gang_bench;
`runs[scenario][approach][rep]` are the recorded runs.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from escher_harness.bench.approaches import registry
from escher_harness.bench.topology import SPAN_LEVELS

Runs = Mapping[str, Mapping[str, Mapping[int, Mapping[str, Any]]]]


@dataclass(frozen=True)
class _Canvas:
    """What every plot of a campaign is drawn from: pyplot, the folder, the runs, and
    each approach's colour."""

    plt: Any
    out: Path
    runs: Runs
    scenarios: Sequence[str]
    approaches: Sequence[str]
    colour: Mapping[str, str]


def write(out: Path, runs: Runs, scenarios: Sequence[str], approaches: Sequence[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colour = {a: registry.entry(a).colour for a in approaches}
    canvas = _Canvas(plt, out, runs, scenarios, approaches, colour)
    _latency_cdf(canvas)
    _partial_gangs(canvas)
    _completions(canvas)
    # The topology preset's plots, each drawn when some run has its figures.
    for key, draw in (("placement", _placement), ("free_domains_series", _fragmentation)):
        if any(r.get(key) for by in runs.values() for reps in by.values() for r in reps.values()):
            draw(canvas)


def _bar(ax: Any, i: int, values: Sequence[float], colour: str) -> None:
    """The median of sorted `values` as a bar at `i`, min-max as its error bar, each a dot."""
    mid = statistics.median(values)
    ax.bar(i, mid, color=colour, alpha=0.6)
    ax.errorbar(i, mid, yerr=[[mid - values[0]], [values[-1] - mid]], color="black", capsize=4)
    ax.scatter([i] * len(values), values, color="black", s=10, zorder=3)


def _latency_cdf(c: _Canvas) -> None:
    n = len(c.scenarios)
    fig, axes = c.plt.subplots(1, n, figsize=(6.5 * n, 4.8), squeeze=False)
    for ax, sc in zip(axes[0], c.scenarios, strict=True):
        for a in c.approaches:
            labelled = False
            for rep in sorted(c.runs.get(sc, {}).get(a, {})):
                lat = c.runs[sc][a][rep].get("latencies_ms") or []
                if not lat:
                    continue
                ys = [(i + 1) / len(lat) for i in range(len(lat))]
                ax.step(
                    lat,
                    ys,
                    where="post",
                    color=c.colour[a],
                    alpha=0.75,
                    lw=1.2,
                    label=None if labelled else a,
                )
                labelled = True
        ax.set_xscale("log")
        ax.set_title(f"gang latency CDF: {sc} (a line per repetition)")
        ax.set_xlabel("submission -> last member bound (ms, log scale)")
        ax.set_ylabel("fraction of the run's completed gangs")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(c.out / "latency_cdf.png", dpi=120)
    c.plt.close(fig)


def _partial_gangs(c: _Canvas) -> None:
    n, approaches = len(c.scenarios), c.approaches
    fig, axes = c.plt.subplots(
        len(approaches),
        n,
        figsize=(6.5 * n, 1.6 * len(approaches) + 1),
        squeeze=False,
        sharex="col",
    )
    for col, sc in enumerate(c.scenarios):
        for row, a in enumerate(approaches):
            ax = axes[row][col]
            for rep in sorted(c.runs.get(sc, {}).get(a, {})):
                series = c.runs[sc][a][rep].get("partial_series") or []
                if series:
                    ax.step(
                        [t for t, _ in series],
                        [k for _, k in series],
                        where="post",
                        color=c.colour[a],
                        alpha=0.7,
                        lw=1,
                    )
            ax.set_ylabel(a, fontsize=8)
            ax.grid(True, alpha=0.3)
            if row == 0:
                ax.set_title(f"partially bound gangs over time: {sc}")
        axes[-1][col].set_xlabel("seconds since the clock started (a line per repetition)")
    fig.tight_layout()
    fig.savefig(c.out / "partial_gangs.png", dpi=120)
    c.plt.close(fig)


def _completions(c: _Canvas) -> None:
    n = len(c.scenarios)
    fig, axes = c.plt.subplots(1, n, figsize=(6.5 * n, 4.2), squeeze=False)
    for ax, sc in zip(axes[0], c.scenarios, strict=True):
        for i, a in enumerate(c.approaches):
            reps = c.runs.get(sc, {}).get(a, {})
            done = sorted(r["gangs_completed"] for r in reps.values() if "gangs_completed" in r)
            if not done:
                continue
            _bar(ax, i, done, c.colour[a])
            total = max(r.get("gangs_submitted", 0) for r in reps.values())
            ax.axhline(total, color="grey", lw=0.8, ls="--")
        ax.set_xticks(range(len(c.approaches)), c.approaches, rotation=20, fontsize=8)
        ax.set_title(f"gangs completed: {sc} (dashed: submitted)")
        ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(c.out / "completions.png", dpi=120)
    c.plt.close(fig)


# What placement.png draws: a row per figure of escher_harness.bench.topology.quality.
_PLACEMENT = (
    ("in_one_domain_pct", "gangs inside one domain of their level (%)"),
    ("largest_share", "largest-domain share (1 = all in one)"),
    ("span_ratio_rack", "racks spanned / minimum"),
    ("span_ratio_block", "blocks spanned / minimum"),
)


def _placement(c: _Canvas) -> None:
    n = len(c.scenarios)
    fig, axes = c.plt.subplots(
        len(_PLACEMENT), n, figsize=(6.5 * n, 2.6 * len(_PLACEMENT)), squeeze=False
    )
    for col, sc in enumerate(c.scenarios):
        for row, (key, title) in enumerate(_PLACEMENT):
            ax = axes[row][col]
            for i, a in enumerate(c.approaches):
                reps = c.runs.get(sc, {}).get(a, {})
                vals = sorted(
                    v
                    for r in reps.values()
                    if (v := (r.get("placement") or {}).get(key)) is not None
                )
                if not vals:
                    continue
                _bar(ax, i, vals, c.colour[a])
            ax.set_xticks(range(len(c.approaches)), c.approaches, rotation=20, fontsize=8)
            ax.set_title(f"{sc}: {title}", fontsize=9)
            ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(c.out / "placement.png", dpi=120)
    c.plt.close(fig)


# What fragmentation.png draws: a row per level of escher_harness.bench.fragmentation's series,
# whose columns after the time follow SPAN_LEVELS.
_FREE = (("block", "free whole blocks"), ("rack", "free whole racks"))


def _fragmentation(c: _Canvas) -> None:
    n = len(c.scenarios)
    fig, axes = c.plt.subplots(len(_FREE), n, figsize=(6.5 * n, 3.6 * len(_FREE)), squeeze=False)
    for col, sc in enumerate(c.scenarios):
        for row, (level, title) in enumerate(_FREE):
            ax = axes[row][col]
            column = 1 + SPAN_LEVELS.index(level)
            total = 0
            for a in c.approaches:
                labelled = False
                for rep in sorted(c.runs.get(sc, {}).get(a, {})):
                    r = c.runs[sc][a][rep]
                    series = r.get("free_domains_series") or []
                    if not series:
                        continue
                    total = max(total, (r.get("fragmentation") or {}).get(f"{level}s", 0))
                    ax.step(
                        [s[0] for s in series],
                        [s[column] for s in series],
                        where="post",
                        color=c.colour[a],
                        alpha=0.75,
                        lw=1.2,
                        label=None if labelled else a,
                    )
                    labelled = True
            if total:
                ax.axhline(total, color="grey", lw=0.8, ls="--")
            ax.set_ylim(bottom=0)
            ax.set_title(f"{title} over time: {sc} (dashed: all)", fontsize=9)
            ax.set_ylabel(title, fontsize=8)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
        axes[-1][col].set_xlabel("seconds since the clock started (a line per repetition)")
    fig.tight_layout()
    fig.savefig(c.out / "fragmentation.png", dpi=120)
    c.plt.close(fig)
