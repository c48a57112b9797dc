"""The report's section for E6 (the paper's Fig. 7): per design, the paper's p50 / p90 and
lines of policy beside ours (median [min-max] over repetitions of each run's percentile), the
verdicts on the paper's claims (escher_harness.bench.paper.verdicts), and the CDF of gang
scheduling latency with every repetition's gangs pooled per design, the paper's p50 and p90
marked. Reads E6's records of results.json; called by escher_harness.bench.paper.report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from escher_harness.bench.paper import e6_gangs
from escher_harness.bench.paper.e6_designs import DESIGNS, policy_loc
from escher_harness.bench.paper.verdicts import Verdict, at_most
from escher_harness.bench.stats import spread

PNG: Final = "fig7-e6.png"
# A design's p50 must be at most this share of appspace's and libspace's (the paper's order:
# FrameSpace at least 2x faster than both).
FASTER: Final = 0.5

Results = dict[str, list[Mapping[str, Any]]]  # design -> each repetition's figures


def results(runs: Sequence[Mapping[str, Any]]) -> Results:
    """E6's figures per design in run order; runs that failed are left out."""
    out: Results = {}
    for r in runs:
        e6 = r.get("E6")
        if isinstance(e6, dict) and e6.get("p50_ms") is not None:
            out.setdefault(r["approach"], []).append(e6)
    return out


def _median(rs: Sequence[Mapping[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rs if r.get(key) is not None]
    return spread(values)["median"] if values else None


def verdicts(res: Results) -> list[Verdict]:
    fs = _median(res.get("framespace", []), "p50_ms")
    out = [
        at_most(
            f"E6 framespace: p50 at most {e6_gangs.TARGET_FRAMESPACE_MS:g} ms, a tenth of the "
            f"paper's {e6_gangs.PAPER_MS['framespace'][0]:g} ms",
            fs,
            e6_gangs.TARGET_FRAMESPACE_MS,
            " ms",
        )
    ]
    for slow in ("appspace", "libspace"):
        other = _median(res.get(slow, []), "p50_ms")
        share = fs / other if fs is not None and other else None
        out.append(
            at_most(
                f"E6 framespace at least 2x faster than {slow} at p50 (framespace/{slow})",
                share,
                FASTER,
                "x",
            )
        )
    return out


def _cell(rs: Sequence[Mapping[str, Any]], key: str) -> str:
    values = [r[key] for r in rs if r.get(key) is not None]
    if not values:
        return "-"
    s = spread(values)
    return f"{s['median']:.4g} [{s['min']:.4g}-{s['max']:.4g}]"


def table(res: Results) -> str:
    rows = [
        "| design | here | paper p50 / p90 ms | p50 ms | p90 ms | p50 after last created, ms "
        "| completed / gangs | rollbacks | lines of policy: paper / here |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, d in DESIGNS.items():
        rs = res.get(name, [])
        paper = e6_gangs.PAPER_MS.get(name)
        done = sum(r["completed"] for r in rs)
        gangs = sum(r["gangs"] for r in rs)
        loc = policy_loc(name)
        cells = [
            name,
            d.what,
            f"{paper[0]:g} / {paper[1]:g}" if paper else "-",
            _cell(rs, "p50_ms"),
            _cell(rs, "p90_ms"),
            _cell(rs, "after_created_p50_ms"),
            f"{done} / {gangs}" if rs else "-",
            str(sum(r["rollbacks"] for r in rs)) if rs else "-",
            f"{e6_gangs.PAPER_LOC.get(name, '-')} / {loc if loc is not None else '-'}",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def section(res: Results) -> list[str]:
    sc = e6_gangs.SCENARIO
    return [
        "",
        f"## E6: {e6_gangs.FIGURE}",
        "",
        f"{e6_gangs.WORKLOAD.footing.nodes} nodes of {e6_gangs.WORKLOAD.footing.node_cpu} cpu; "
        f"the gang bench's `{e6_gangs.WORKLOAD.name}` preset, scenario `{sc.name}` "
        f"(sizes {sc.sizes}, shapes {sc.shapes}, run time {sc.run_time}) at {sc.rate:g} gangs/s "
        f"(the paper: about {e6_gangs.PAPER_RATE:g}/s). Latency: submission to the last member "
        "bound, completed gangs; each repetition's percentile, median [min-max]. \"After last "
        "created\": the part of each gang's latency after its last member pod existed.",
        "",
        table(res),
        "",
        *[v.line() for v in verdicts(res)],
        "",
        f"![E6]({PNG})",
    ]


def plot(out: Path, res: Results) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for i, name in enumerate(DESIGNS):
        pooled = sorted(v for r in res.get(name, []) for v in r["latencies_ms"])
        if not pooled:
            continue
        ys = [(k + 1) / len(pooled) for k in range(len(pooled))]
        ax.step(pooled, ys, where="post", color=f"C{i}", label=name)
        paper = e6_gangs.PAPER_MS.get(name)
        if paper:
            ax.scatter(paper, [0.5, 0.9], color=f"C{i}", marker="x", s=40)
    ax.set_xscale("log")
    ax.set_xlabel("gang scheduling latency, ms (x: the paper's p50 and p90)")
    ax.set_ylabel("CDF")
    ax.set_title(f"E6: {e6_gangs.FIGURE}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / PNG, dpi=120)
    plt.close(fig)
