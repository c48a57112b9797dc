"""The scheduling-perf report: figures over repetitions (median [min-max]), a markdown table
per scenario with the published figures beside ours (marked as theirs, with their machine),
and per scenario a plot like the fork's report: pods created and scheduled over time per
approach (every repetition), beside the created-to-scheduled CDF. Called by
escher_harness.bench.kubeschedperf.run; `runs[scenario][approach][rep]` are its saved runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from escher_harness.bench import stats
from escher_harness.bench.approaches import registry
from escher_harness.bench.kubeschedperf import shapes

Runs = dict[str, dict[str, dict[int, dict[str, Any]]]]


def _latency(q: str) -> Callable[[Mapping[str, Any]], float | None]:
    return lambda r: (r.get("latency_s") or {}).get(q)


def _cpu(name: str) -> Callable[[Mapping[str, Any]], float | None]:
    return lambda r: (r.get("cpu_seconds") or {}).get(name)


def _writes_per_pod(r: Mapping[str, Any]) -> float | None:
    """None where a counter went down: the API server's last /metrics answer was cut short
    (seen under overload), so the writes were not read."""
    n: int = r.get("scheduled") or 0
    writes: Mapping[str, int] = r.get("writes") or {}
    if not n or any(v < 0 for v in writes.values()):
        return None
    return round(sum(writes.values()) / n, 2)


# (column, unit, how a run gives it): the table's figures, in order.
FIGURES: tuple[tuple[str, str, Callable[[Mapping[str, Any]], Any]], ...] = (
    ("scheduled", "pods", lambda r: r.get("scheduled")),
    ("to last scheduled", "s", lambda r: r.get("to_last_scheduled_s")),
    ("p50", "s", _latency("p50")),
    ("p90", "s", _latency("p90")),
    ("p99", "s", _latency("p99")),
    ("binding window", "s", lambda r: r.get("binding_window_s")),
    ("creation", "s", lambda r: r.get("creation_s")),
    ("gangs partly bound", "", lambda r: r.get("partly_bound_gangs")),
    ("nodes over capacity", "", lambda r: r.get("nodes_over_capacity")),
    ("API writes/pod", "", _writes_per_pod),
    ("kube-scheduler CPU", "s", _cpu("kube-scheduler")),
    ("extender CPU", "s", _cpu("extender")),
)


def aggregate(runs: Runs) -> dict[str, Any]:
    """Per scenario and approach: each figure's spread over the repetitions that gave it,
    how each repetition stopped, and the errors."""
    out: dict[str, Any] = {}
    for sc, per in runs.items():
        for a, reps in per.items():
            ok = [r for r in reps.values() if "error" not in r]
            figures = {}
            for name, _, get in FIGURES:
                values = [v for r in ok if (v := get(r)) is not None]
                figures[name] = stats.spread(values) if values else None
            out.setdefault(sc, {})[a] = {
                "figures": figures,
                "stopped": {str(k): r.get("stopped", r.get("error")) for k, r in reps.items()},
                "incomplete": sum(1 for r in ok if r.get("to_last_scheduled_s") is None),
            }
    return out


def _cell(s: Mapping[str, float] | None) -> str:
    if s is None:
        return "-"
    if s["min"] == s["max"]:
        return f"{s['median']:g}"
    return f"{s['median']:g} [{s['min']:g}-{s['max']:g}]"


def table(results: Mapping[str, Any], scenario: str, which: Sequence[str]) -> str:
    head = [f"{n} ({u})" if u else n for n, u, _ in FIGURES]
    lines = [
        "| approach | " + " | ".join(head) + " |",
        "|---" * (len(head) + 1) + "|",
    ]
    for a in which:
        row = results.get(scenario, {}).get(a)
        if row is None:
            continue
        cells = [_cell(row["figures"].get(n)) for n, _, _ in FIGURES]
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    number = shapes.BY_NAME[scenario].number
    for p in shapes.PUBLISHED.get(number, ()):
        took = f"{p.seconds:g}" if p.seconds is not None else "not reached"
        blank = " | ".join("" for _ in FIGURES[2:])
        lines.append(f"| *{p.scheduler} (theirs)* | *10000* | *{took}* | {blank} |")
    return "\n".join(lines)


def markdown(doc: Mapping[str, Any], runs: Runs, names: Sequence[str], which: Sequence[str]) -> str:
    cfg = doc["config"]
    parts = [
        "# kube-scheduling-perf's scenarios on the embedded control plane\n",
        f"`{doc['command']}`, started {doc['started']}, {doc['duration_s']:.0f} s.",
        f"Ours: {cfg['describe']} (cells: median [min-max] over the repetitions that ran), "
        f"on {doc['environment']['machine']['cores']} cores shared with other work.",
        f"Theirs (*italic*): the fork's published figures, on {shapes.THEIR_MACHINE}, "
        "10,000 pods on 1,000 nodes; Kueue's and YuniKorn's read off their plots.\n",
        "Times are from the API server's audit log: created-to-scheduled per pod (pods' "
        "create to their pods/binding create), to last scheduled from the first pod created "
        "to the last bound. Gangs partly bound: some but not all members bound past their "
        "bind burst (two bindings more than 1 s apart, or left incomplete).\n",
    ]
    for sc in names:
        parts.append(f"## {sc}\n")
        parts.append(table(doc["results"], sc, which) + "\n")
        for a, row in doc["results"].get(sc, {}).items():
            stops = {k: v for k, v in row["stopped"].items() if v != "all bound"}
            if stops:
                parts.append(f"- {a}: " + "; ".join(f"r{k}: {v}" for k, v in stops.items()))
        for a, why in doc["skipped"].get(sc, {}).items():
            parts.append(f"- {a}: not run: {why}")
        parts.append(f"\n![{sc}](scheduling-perf-{sc}.png)\n")
    return "\n".join(parts) + "\n"


def plots(
    out: Path, runs: Runs, scenarios: Sequence[shapes.Scenario], which: Sequence[str]
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colour = {e.name: e.colour for e in registry.REGISTRY}
    for sc in scenarios:
        per = runs.get(sc.name, {})
        if not per:
            continue
        fig, (over, cdf) = plt.subplots(1, 2, figsize=(13, 4.8))
        for a in which:
            for rep, r in sorted(per.get(a, {}).items()):
                series = r.get("series")
                if not series:
                    continue
                label = a if rep == min(per[a]) else None
                done = series["scheduled"]
                over.step(done, range(1, len(done) + 1), where="post", color=colour[a], label=label)
                made = series["created"]
                over.plot(made, range(1, len(made) + 1), "--", color=colour[a], alpha=0.5, lw=1)
                lat = series.get("latencies") or []
                if lat:
                    cdf.step(lat, [i / len(lat) for i in range(1, len(lat) + 1)], color=colour[a])
        full = any(r.get("pods") == shapes.PODS for reps in per.values() for r in reps.values())
        for p in shapes.PUBLISHED.get(sc.number, ()) if full else ():
            if p.seconds is not None:  # theirs, beside ours only at their size
                over.axvline(p.seconds, ls=":", color="grey")
                over.text(p.seconds, 0, f" {p.scheduler}\n (theirs)", fontsize=7, color="grey")
        over.set(
            xlabel="seconds since the first pod created",
            ylabel="pods (solid: scheduled, dashed: created)",
            title=f"{sc.name}: scheduled over time",
        )
        if over.get_legend_handles_labels()[0]:  # none when every run failed
            over.legend(loc="lower right", fontsize=8)
        cdf.set(xlabel="created-to-scheduled (s)", ylabel="fraction of pods", title="distribution")
        fig.tight_layout()
        fig.savefig(out / f"scheduling-perf-{sc.name}.png", dpi=100)
        plt.close(fig)
