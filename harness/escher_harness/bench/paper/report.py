"""The report of `bench paper`: per figure of the paper, a table with the paper's number
beside each mode's (median [min-max] over the repetitions), the verdict line of each claim
(escher_harness.bench.paper.verdicts), and a plot shaped like the paper's (lines against a
log axis, the paper's curve dashed in black, every repetition a dot). Reads the runs of
results.json (`series` gathers them); writes DIR/report.md and DIR/fig8*.png and returns
the report's text. Called by escher_harness.bench.paper.runner.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from escher_harness.bench.paper import e7_creation, e8_makespan, e9_requested, fig5, fig5c, fig7
from escher_harness.bench.paper.verdicts import Verdict, at_most, ratio, spread_ratio
from escher_harness.bench.stats import spread

# series name -> x -> the figure of each repetition
Series = dict[str, dict[int, list[float]]]


@dataclass(frozen=True)
class Figure:
    name: str  # E7, ...
    title: str
    x: str
    y: str  # what a value is, with its unit
    series: Series
    paper: Mapping[int, float]  # the paper's points (empty: it gives a band)
    band: tuple[float, float] | None = None  # the paper's range, where it gives no points
    verdicts: tuple[Verdict, ...] = ()


def series(runs: Sequence[Mapping[str, Any]], experiment: str, value: Callable[..., Any]) -> Series:
    """`value(result)` of every run's `experiment`, by series and x: E7's results are by
    client count, then size (series "mode, c client(s)"); the others by size (series
    "mode"). A size not reached is left out; a failed run keeps the sizes it measured."""
    out: Series = {}
    for run in runs:
        if experiment not in run or "mode" not in run:  # another experiment's record
            continue
        result = {k: v for k, v in (run.get(experiment) or {}).items() if k != "error"}
        groups = (
            {f"{run['mode']}, {c} client(s)": by for c, by in result.items()}
            if experiment == "E7"
            else {run["mode"]: result}
        )
        for name, by_x in groups.items():
            for x, r in by_x.items():
                v = value(r) if isinstance(r, dict) and r else None
                if v is not None:
                    out.setdefault(name, {}).setdefault(int(x), []).append(float(v))
    return out


def medians(s: Mapping[int, Sequence[float]]) -> dict[int, float]:
    return {x: spread(v)["median"] for x, v in s.items()}


def figures(runs: Sequence[Mapping[str, Any]]) -> list[Figure]:
    out = []
    e7 = series(runs, "E7", lambda r: r["amortised_ms"])
    if e7:
        out.append(_e7(e7))
    e8 = series(runs, "E8", lambda r: r["makespan_s"])
    if e8:
        out.append(_e8(e8))
    e9 = series(runs, "E9", lambda r: (r["latency_ms"] or {}).get("p50"))
    if e9:
        out.append(_e9(e9))
    return out


def _e7(s: Series) -> Figure:
    paper = e7_creation.PAPER_MS
    verdicts = []
    for name, by in s.items():
        m = medians(by)
        verdicts += [
            at_most(
                f"E7 {name}: per resource at 1,000 resources at most the paper's {paper[1000]} ms",
                m.get(1000),
                paper[1000],
                " ms",
            ),
            at_most(
                f"E7 {name}: cheaper per resource at 1,000 than at 10, as the paper's "
                f"{paper[1000]}/{paper[10]}",
                ratio(m, 1000, 10),
                paper[1000] / paper[10],
                "x",
            ),
        ]
    return Figure(
        "E7",
        e7_creation.FIGURE,
        e7_creation.X,
        "ms per resource, set_resource to its pod bound",
        s,
        paper,
        verdicts=tuple(verdicts),
    )


def _e8(s: Series) -> Figure:
    low, high = e8_makespan.PAPER_S
    verdicts = [
        at_most(
            f"E8 {name}: makespan flat in the resources present (max/min at most the "
            f"paper's {high}/{low})",
            spread_ratio(medians(by)),
            high / low,
            "x",
        )
        for name, by in s.items()
    ]
    return Figure(
        "E8",
        e8_makespan.FIGURE,
        e8_makespan.X,
        "makespan, s",
        s,
        {},
        band=(low, high),
        verdicts=tuple(verdicts),
    )


def _e9(s: Series) -> Figure:
    p = e9_requested.PAPER_MS
    verdicts = []
    for name, by in s.items():
        m = medians(by)
        verdicts += [
            at_most(
                f"E9 {name}: flat up to 100 requested (100 vs 10 at most the paper's "
                f"{p[100]}/{p[10]})",
                ratio(m, 100, 10),
                p[100] / p[10],
                "x",
            ),
            at_most(
                f"E9 {name}: growth to 1,000 requested at most the paper's {p[1000]}/{p[10]}",
                ratio(m, 1000, 10),
                p[1000] / p[10],
                "x",
            ),
            at_most(
                f"E9 {name}: per-pod latency at 10 requested at most the paper's {p[10]} ms",
                m.get(10),
                p[10],
                " ms",
            ),
        ]
    return Figure(
        "E9",
        e9_requested.FIGURE,
        e9_requested.X,
        "per-pod latency p50, ms",
        s,
        p,
        verdicts=tuple(verdicts),
    )


def table(f: Figure) -> str:
    names = list(f.series)
    xs = sorted({x for by in f.series.values() for x in by} | set(f.paper))
    paper_band = f"{f.band[0]}-{f.band[1]}" if f.band else ""
    rows = [
        f"| {f.x} | paper | " + " | ".join(names) + " |",
        "|---" * (len(names) + 2) + "|",
    ]
    for x in xs:
        cells = [str(x), str(f.paper.get(x, paper_band))]
        for n in names:
            v = f.series[n].get(x)
            cells.append(_spread(v) if v else "-")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _spread(values: Sequence[float]) -> str:
    s = spread(values)
    return f"{s['median']:.4g} [{s['min']:.4g}-{s['max']:.4g}]"


def text(
    doc: Mapping[str, Any], figs: Sequence[Figure], sections: Sequence[Sequence[str]] = ()
) -> str:
    """The report: its head, each section of an experiment with its own clusters (E6, ...),
    then each figure of Fig. 8, and the runs that failed."""
    cfg = doc["config"]
    parts = [
        "# The ESCHER paper's experiments, reproduced on Kubernetes",
        "",
        f"Command: `{doc['command']}`  ",
        f"Experiments {', '.join(cfg['experiments'])}; E7-E9 on {cfg['nodes']} kwok nodes, "
        f"modes {', '.join(cfg['modes'])}; {cfg['repeat']} "
        f"interleaved repetition(s), seed {cfg['seed']}; started {doc['started']} on "
        f"{doc['machine']['cores']} cores (load at start "
        f"{doc['machine']['load_average_at_start']}); "
        f"Kubernetes {doc['versions']['kubernetes']}, commit {doc['versions']['commit']}.",
        "Values: median [min-max] over the repetitions. The paper's figures are Ray's "
        "(SoCC 2022); see docs/paper.md for what differs.",
    ]
    for section in sections:
        parts += section
    for f in figs:
        parts += ["", f"## {f.name}: {f.title}", "", f"{f.y}, by {f.x}.", "", table(f), ""]
        parts += [v.line() for v in f.verdicts]
        parts += ["", f"![{f.name}]({_png(f)})"]
    errors = [f"- rep {r['rep']} {_who(r)}: {r['error']}" for r in doc["runs"] if "error" in r]
    errors += [
        f"- rep {r['rep']} {_who(r)} {e}: {r[e]['error']}"
        for r in doc["runs"]
        for e in cfg["experiments"]
        if isinstance(r.get(e), dict) and "error" in r[e]
    ]
    if errors:
        parts += ["", "## Runs that failed", "", *errors]
    return "\n".join(parts) + "\n"


def _who(run: Mapping[str, Any]) -> str:
    """The mode (E7-E9) or the approach (the experiments with clusters of their own) of a run."""
    return str(run.get("mode") or run.get("approach"))


def _png(f: Figure) -> str:
    return f"fig8-{f.name.lower()}.png"


def plot(out: Path, f: Figure) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for i, (name, by) in enumerate(f.series.items()):
        xs = sorted(by)
        colour = f"C{i}"
        ax.plot(xs, [medians(by)[x] for x in xs], marker="o", color=colour, label=name)
        for x in xs:
            ax.scatter([x] * len(by[x]), by[x], color=colour, s=10, alpha=0.5)
    if f.paper:
        xs = sorted(f.paper)
        ax.plot(xs, [f.paper[x] for x in xs], "k--", marker="x", label="paper (Ray)")
    if f.band:
        ax.axhspan(*f.band, color="k", alpha=0.15, label="paper (Ray), 10,000 tasks")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f.x)
    ax.set_ylabel(f.y)
    ax.set_title(f"{f.name}: {f.title}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / _png(f), dpi=120)
    plt.close(fig)


def write(out: Path, doc: Mapping[str, Any]) -> str:
    figs = figures(doc["runs"])
    for f in figs:
        plot(out, f)
    sections = []
    e6 = fig7.results(doc["runs"])
    if e6:
        fig7.plot(out, e6)
        sections.append(fig7.section(e6))
    for name in ("E1", "E2"):
        res = fig5.results(doc["runs"], name)
        if res:
            fig5.plot(out, name, res)
            sections.append(fig5.section(name, res))
    e3 = fig5c.results(doc["runs"])
    if e3:
        fig5c.plot(out, e3, doc["config"]["e3"])
        sections.append(fig5c.section(e3, doc["config"]["e3"]))
    body = text(doc, figs, sections)
    (out / "report.md").write_text(body)
    return body
