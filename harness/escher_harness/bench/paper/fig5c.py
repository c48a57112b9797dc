"""The report's section for E3 (the paper's Fig. 5c): per phase and user, the share the
weights define, the paper's plot and each mode's measured share (median [min-max] over
repetitions of the phase's mean), the verdicts (every share within 3 points of the weights'
in every phase) and the shares over time, one panel per mode, the weights' shares dashed.
Reads E3's records of results.json; called by escher_harness.bench.paper.report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from escher_harness.bench.paper import e3_fairshare
from escher_harness.bench.paper.e3_fairshare import EXPECTED, PAPER, USERS
from escher_harness.bench.paper.verdicts import Verdict, at_most
from escher_harness.bench.stats import spread

PNG: Final = "fig5-e3.png"
POINTS: Final = 0.03  # a share within 3 points of the weights'

Results = dict[str, list[Mapping[str, Any]]]  # mode -> each repetition's E3 record


def results(runs: Sequence[Mapping[str, Any]]) -> Results:
    out: Results = {}
    for r in runs:
        e3 = r.get("E3")
        if isinstance(e3, dict) and e3.get("shares"):
            out.setdefault(r["approach"], []).append(e3)
    return out


def _shares(rs: Sequence[Mapping[str, Any]], phase: int, user: str) -> list[float]:
    return [v for r in rs if (v := r["shares"][phase][user]) is not None]


def verdicts(res: Results) -> list[Verdict]:
    out = []
    for mode, rs in res.items():
        worst: tuple[float, str] | None = None
        for k, want in enumerate(EXPECTED):
            for u in USERS:
                got = _shares(rs, k, u)
                if not got:
                    continue
                off = abs(spread(got)["median"] - want[u])
                if worst is None or off > worst[0]:
                    worst = (off, f"phase {k + 1} user {u.upper()}")
        out.append(
            at_most(
                f"E3 {mode}: every user's share within 3 points of its weights' in every phase "
                f"(largest miss{', ' + worst[1] if worst else ''}, in share)",
                worst[0] if worst else None,
                POINTS,
                "",
                tolerance=0.0,
            )
        )
    return out


def table(res: Results) -> str:
    modes = list(res)
    rows = [
        "| phase | user | weights' share | paper's plot | " + " | ".join(modes) + " |",
        "|---" * (len(modes) + 4) + "|",
    ]
    for k, want in enumerate(EXPECTED):
        for u in USERS:
            cells = [str(k + 1), u.upper(), f"{want[u]:.0%}", f"{PAPER[k][u]:.0%}"]
            for m in modes:
                got = _shares(res[m], k, u)
                s = spread(got) if got else None
                cells.append(f"{s['median']:.1%} [{s['min']:.1%}-{s['max']:.1%}]" if s else "-")
            rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def section(res: Results, setup: Mapping[str, Any]) -> list[str]:
    return [
        "",
        f"## E3: {e3_fairshare.FIGURE}",
        "",
        f"A, B (weights 2:3) in sub-org 1, C in sub-org 2 (sub-orgs 1:1); arrivals "
        f"{setup['phase_s']:g} s apart; {setup['slots']} slots, tasks of {setup['task_s']:g} s "
        f"(kwok's run time); each phase's mean share of the slots after {setup['settle_s']:g} s "
        "in it, median [min-max] over repetitions.",
        "",
        table(res),
        "",
        *[v.line() for v in verdicts(res)],
        "",
        f"![E3]({PNG})",
    ]


def plot(out: Path, res: Results, setup: Mapping[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(res), figsize=(5 * len(res), 3.5), squeeze=False)
    for ax, (mode, rs) in zip(axes[0], res.items(), strict=True):
        samples = rs[0]["samples"]  # the first repetition's curve
        ts = [s["t"] for s in samples]
        for i, u in enumerate(USERS):
            ax.plot(ts, [s[u] / setup["slots"] for s in samples], color=f"C{i}", label=u.upper())
            for k, want in enumerate(EXPECTED):
                span = (k * setup["phase_s"], (k + 1) * setup["phase_s"])
                ax.hlines(want[u], *span, colors=f"C{i}", linestyles="dashed", linewidth=0.8)
        ax.set_title(f"E3 {mode} (dashed: the weights' shares)", fontsize=9)
        ax.set_xlabel("s")
        ax.set_ylabel("share of the slots")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / PNG, dpi=120)
    plt.close(fig)
