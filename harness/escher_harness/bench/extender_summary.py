"""The figures of `bench extender`, computed from its recorded rows. Pure, no I/O.

Throughput rows (escher_harness.bench.throughput, one per mode, workload, size and
repetition) become, per size and workload: each mode's pods/s as median, min and max over the
repetitions; the ratios measured within one repetition (extender, pure and dra against
kube-scheduler alone for plain pods, extender and dra against pure for ephemeral and prefer
ones, the extender modes against kube-scheduler alone for gang members), again as median, min
and max, for pods/s and for API writes per pod; the CPU each component spent per pod
(kube-controller-manager's too: it runs in mode dra); the API writes per pod; the extender's
share of kube-scheduler's cycle; and the extender's verb latencies and bind against the API
server's binding latency. The set_resource-to-schedulable trials
(escher_harness.bench.wake) become, per size and mode, the spread of their first and last
binds (`wake_summary`). `guard` compares a run with an earlier one. Called by
escher_harness.bench.extender_bench and tested in tests/unit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from escher_harness.bench.stats import spread

# The processes whose CPU time a throughput run reads, in the tables' order.
COMPONENTS = ("extender", "kube-scheduler", "kube-apiserver", "etcd", "kube-controller-manager")
# Ratios as (numerator mode, denominator mode) per workload, each measured within one
# repetition: the same machine state, minutes apart at most.
# The modes measured against pure for the pods of the policy API's resources (and, like pure,
# against none for plain pods).
AGAINST_PURE = (
    "extender",
    "extender-http",
    "extender-split",
    "extender-split-h2",
    "extender-split-h1",
    "extender-split-http",
    "dra",
)
RATIOS: Mapping[str, tuple[tuple[str, str], ...]] = {
    "plain": tuple((mode, "none") for mode in ("none-markers", "pure", *AGAINST_PURE)),
    **{kind: tuple((mode, "pure") for mode in AGAINST_PURE) for kind in ("ephemeral", "prefer")},
    # kube-scheduler alone places the same pods with no gang semantics: what gangs cost.
    "gang": tuple((mode, "none") for mode in AGAINST_PURE if mode.startswith("extender")),
}
# The modes the regression guard watches: every pod through the extender, and as deploy/
# runs it (each exchange only for the pods that need it).
GUARDED = ("extender", "extender-split")
# Worse than the baseline by more than this is reported as a regression.
REGRESSION = 0.25


def _get(row: Mapping[str, Any], path: str) -> float | None:
    value: Any = row
    for key in path.split("."):
        if not isinstance(value, Mapping) or value.get(key) is None:
            return None
        value = value[key]
    return float(value)


def _spread_of(rows: Iterable[Mapping[str, Any]], path: str) -> dict[str, float] | None:
    values = [v for r in rows if (v := _get(r, path)) is not None]
    return spread(values) if values else None


def extender_share(row: Mapping[str, Any], alone: Mapping[str, Any]) -> float | None:
    """The extender's share of kube-scheduler's cycle in one repetition: the scheduling
    algorithm's time outside the framework's phases beyond what it is without an extender,
    per pod, over the cycle's length per pod (1 / throughput)."""
    extra = _get(row, "scheduler.outside_framework_ms_per_pod")
    base = _get(alone, "scheduler.outside_framework_ms_per_pod")
    rate = _get(row, "pods_per_s")
    if extra is None or base is None or not rate:
        return None
    return max(0.0, extra - base) / (1000.0 / rate)


def summarize(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (nodes, workload): per mode the spread of each figure, and the ratios."""
    out = []
    for nodes, workload in sorted({(r["nodes"], r["workload"]) for r in rows}):
        here = [r for r in rows if r["nodes"] == nodes and r["workload"] == workload]
        by_rep: dict[int, dict[str, Mapping[str, Any]]] = {}
        for r in here:
            by_rep.setdefault(r["rep"], {})[r["mode"]] = r
        modes: dict[str, Any] = {}
        for mode in sorted({r["mode"] for r in here}):
            mine = [r for r in here if r["mode"] == mode]
            cpu_names = sorted({k for r in mine for k in r["cpu_ms_per_pod"]})
            modes[mode] = {
                "pods_per_s": _spread_of(mine, "pods_per_s"),
                "cpu_ms_per_pod": {n: _spread_of(mine, f"cpu_ms_per_pod.{n}") for n in cpu_names},
                "algorithm_ms_per_pod": _spread_of(mine, "scheduler.algorithm_ms_per_pod"),
                "outside_framework_ms_per_pod": _spread_of(
                    mine, "scheduler.outside_framework_ms_per_pod"
                ),
                "client_rate_limiter_wait_s": _spread_of(
                    mine, "scheduler.client_rate_limiter_wait_s"
                ),
                "batch_hint_used_share": _spread_of(mine, "scheduler.batch_hint_used_share"),
                "verb_ms": {
                    f"{verb}.{q}": _spread_of(mine, f"extender.verb_ms.{verb}.{q}")
                    for verb in ("filter", "prioritize", "bind")
                    for q in ("p50", "p99")
                },
                "bind_api_p50_ms": _spread_of(mine, "extender.bind_api_ms.p50"),
                "apiserver_binding_p50_ms": _spread_of(mine, "apiserver_binding_ms.p50"),
                "api_writes_per_pod": _spread_of(mine, "api_writes.per_pod"),
                "api_writes_by_request": {
                    k: _spread_of(mine, f"api_writes.by_request.{k}")
                    for k in sorted(
                        {k for r in mine for k in (r.get("api_writes") or {}).get("by_request", {})}
                    )
                },
                "over_capacity": sum(len(r["over_capacity"]) for r in mine),
                "extender_share_of_cycle": _shares(by_rep, mode),
            }
        out.append(
            {
                "nodes": nodes,
                "workload": workload,
                "modes": modes,
                "ratios": _ratios(by_rep, workload, "pods_per_s"),
                "write_ratios": _ratios(by_rep, workload, "api_writes.per_pod"),
            }
        )
    return out


def _ratios(
    by_rep: Mapping[int, Mapping[str, Mapping[str, Any]]], workload: str, path: str
) -> dict[str, dict[str, float]]:
    """RATIOS of the figure at `path`, each taken within one repetition."""
    ratios = {}
    for top, bottom in RATIOS.get(workload, ()):
        values = [
            a / b
            for m in by_rep.values()
            if top in m and bottom in m
            if (a := _get(m[top], path)) is not None and (b := _get(m[bottom], path))
        ]
        if values:
            ratios[f"{top}/{bottom}"] = spread(values)
    return ratios


def wake_summary(trials: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (nodes, mode): the set_resource-to-schedulable trials of every repetition pooled,
    as the spread (median, min, max) of the first bind, the last bind and the call itself
    (seconds from the call); trials whose pods were not all bound are counted apart."""
    out = []
    for nodes, mode in sorted({(t["nodes"], t["mode"]) for t in trials}):
        mine = [t for t in trials if (t["nodes"], t["mode"]) == (nodes, mode)]
        out.append(
            {
                "nodes": nodes,
                "mode": mode,
                "trials": len(mine),
                "not_all_bound": sum(1 for t in mine if t.get("all_s") is None),
                "first_s": _spread_of(mine, "first_s"),
                "all_s": _spread_of(mine, "all_s"),
                "set_call_s": _spread_of(mine, "set_call_s"),
            }
        )
    return out


def wake_table(summary: Sequence[Mapping[str, Any]]) -> str:
    return table(
        [
            "nodes",
            "mode",
            "trials",
            "first bound s",
            "all bound s",
            "set_resource call s",
            "not all",
        ],
        [
            [
                s["nodes"],
                s["mode"],
                s["trials"],
                _fmt(s["first_s"], 2),
                _fmt(s["all_s"], 2),
                _fmt(s["set_call_s"], 2),
                s["not_all_bound"],
            ]
            for s in summary
        ],
    )


def _shares(
    by_rep: Mapping[int, Mapping[str, Mapping[str, Any]]], mode: str
) -> dict[str, float] | None:
    """The extender's share of the cycle in `mode` (a mode calling the extender), against
    kube-scheduler alone in the same repetition; None without both."""
    if not mode.startswith("extender"):
        return None
    shares = [
        s
        for m in by_rep.values()
        if mode in m and "none" in m
        if (s := extender_share(m[mode], m["none"])) is not None
    ]
    return spread(shares) if shares else None


def _fmt(s: Mapping[str, float] | None, digits: int = 1) -> str:
    if not s:
        return "-"
    if s["n"] == 1:
        return f"{s['median']:.{digits}f}"
    return f"{s['median']:.{digits}f} [{s['min']:.{digits}f}-{s['max']:.{digits}f}]"


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table (readable as plain text too)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


_TPUT_CAPTION = (
    "Scheduling throughput, pods/s over the 10-90% bind window, median [min-max] over "
    "repetitions, and kube-apiserver's write requests (POST/PUT/PATCH/DELETE/APPLY, "
    "leases left out) per scheduled pod; ratios measured within each repetition "
    "(plain pods: against none; ephemeral and prefer: against pure; gang members: "
    "against none, which places the same pods with no gang semantics):\n"
)
_TPUT_HEAD = (
    "nodes",
    "pods",
    "mode",
    "pods/s",
    "ratio",
    "writes/pod",
    "writes ratio",
    "over capacity",
)
_CYCLE_CAPTION = (
    "kube-scheduler's cycle per pod (ms, its own metrics): the algorithm, its part "
    "outside the framework's phases (the extender's calls), and the extender's share "
    "of the cycle; and how long its requests waited in all for its client's QPS budget "
    "(s, client-go's rest_client_rate_limiter_duration_seconds: more than a little "
    "means the budget, not the scheduler, set the pace); and the share of pods "
    "placed on opportunistic batching's hint (scheduler_batch_attempts_total "
    "hint_used per pod: the cluster's filters and scores skipped; off for a profile "
    "with any extender, and for every pod while PodTopologySpread has default "
    "constraints, as in the default profile):\n"
)
_CYCLE_HEAD = (
    "nodes",
    "pods",
    "mode",
    "algorithm",
    "outside framework",
    "extender share",
    "QPS wait s",
    "batched",
)
_VERB_COLS = tuple(
    f"{verb} {q}" for verb in ("bind", "filter", "prioritize") for q in ("p50", "p99")
)


def throughput_tables(summary: Sequence[Mapping[str, Any]]) -> str:
    """The report's throughput, CPU, cycle and verb tables (median [min-max])."""
    tput, cpu, cycle, verbs = [], [], [], []
    for s in summary:
        for mode, m in s["modes"].items():
            key = [s["nodes"], s["workload"], mode]
            tput.append(key + _tput_cells(s, mode, m))
            c = m["cpu_ms_per_pod"]
            cpu.append(key + [_fmt(c.get(n), 2) for n in COMPONENTS])
            share = m["extender_share_of_cycle"]
            cycle.append(
                [
                    *key,
                    _fmt(m["algorithm_ms_per_pod"], 2),
                    _fmt(m["outside_framework_ms_per_pod"], 2),
                    _fmt(share, 2) if share else "",
                    _fmt(m.get("client_rate_limiter_wait_s"), 2),
                    _fmt(m.get("batch_hint_used_share"), 2),
                ]
            )
            v = m["verb_ms"]
            if any(v.values()):  # only modes whose pods were sent to the extender
                verbs.append(
                    key
                    + [_fmt(v[k], 2) for k in sorted(v)]
                    + [_fmt(m["bind_api_p50_ms"], 2), _fmt(m["apiserver_binding_p50_ms"], 2)]
                )
    return "\n\n".join(
        [
            _TPUT_CAPTION + table(_TPUT_HEAD, tput),
            "CPU time per scheduled pod (ms), median [min-max]:\n"
            + table(["nodes", "pods", "mode", *COMPONENTS], cpu),
            _CYCLE_CAPTION + table(_CYCLE_HEAD, cycle),
            "The extender's verbs, server-side (ms, from its histograms), and its Binding "
            "POSTs against the API server's own binding latency (p50):\n"
            + table(
                ["nodes", "pods", "mode", *_VERB_COLS, "bind API p50", "apiserver binding p50"],
                verbs,
            ),
        ]
    )


def _tput_cells(s: Mapping[str, Any], mode: str, m: Mapping[str, Any]) -> list[object]:
    """A mode's throughput row after its key: pods/s, its ratio, writes/pod and theirs."""
    ratio = next((_fmt(v, 2) for k, v in s["ratios"].items() if k.startswith(f"{mode}/")), "")
    write_ratio = next(
        (_fmt(v, 2) for k, v in s.get("write_ratios", {}).items() if k.startswith(f"{mode}/")),
        "",
    )
    return [
        _fmt(m["pods_per_s"]),
        ratio,
        _fmt(m.get("api_writes_per_pod"), 2),
        write_ratio,
        m["over_capacity"],
    ]


def writes_table(summary: Sequence[Mapping[str, Any]]) -> str:
    """Per size, pod class and mode: the write requests per pod, each `VERB resource` its
    column (median over repetitions; "-" where a mode made none)."""
    keys = sorted(
        {
            k
            for s in summary
            for m in s["modes"].values()
            for k in m.get("api_writes_by_request", {})
        }
    )
    rows = []
    for s in summary:
        for mode, m in s["modes"].items():
            per = m.get("api_writes_by_request", {})
            rows.append(
                [s["nodes"], s["workload"], mode, _fmt(m.get("api_writes_per_pod"), 2)]
                + [_fmt(per.get(k), 2) for k in keys]
            )
    return table(["nodes", "pods", "mode", "total", *keys], rows)


def latency_table(rows: Sequence[Mapping[str, Any]]) -> str:
    return table(
        ["verb", "nodes", "pod", "load", "calls/s", "p50", "p90", "p99", "max"],
        [
            [
                r["verb"],
                r["nodes"],
                r["pod"],
                r["load"],
                r["calls_per_s"],
                *(r["server_ms"][q] for q in ("p50", "p90", "p99", "max")),
            ]
            for r in rows
        ],
    )


def guard(
    summary: Sequence[Mapping[str, Any]], baseline: Sequence[Mapping[str, Any]] | None
) -> list[str]:
    """The regression guard: per size, the extender/none ratio and the extender's CPU per
    pod (plain pods), against `baseline` (an earlier run's summary) when given."""
    before = {(s["nodes"], s["workload"]): s for s in baseline or ()}
    lines = []
    for s in (s for s in summary if s["workload"] == "plain"):
        for mode in (m for m in GUARDED if m in s["modes"]):
            ratio = s["ratios"].get(f"{mode}/none")
            cpu = s["modes"][mode]["cpu_ms_per_pod"].get("extender")
            line = (
                f"guard: {s['nodes']} nodes: throughput {mode}/none {_fmt(ratio, 2)} "
                f"(target >= 0.9), extender CPU {_fmt(cpu, 2)} ms per pod"
            )
            old = before.get((s["nodes"], s["workload"]))
            if old is not None and ratio and cpu:
                old_ratio = old["ratios"].get(f"{mode}/none")
                old_cpu = old["modes"].get(mode, {}).get("cpu_ms_per_pod", {}).get("extender")
                if old_ratio and ratio["median"] < old_ratio["median"] * (1 - REGRESSION):
                    line += f"; REGRESSION: ratio was {old_ratio['median']:.2f}"
                if old_cpu and cpu["median"] > old_cpu["median"] * (1 + REGRESSION):
                    line += f"; REGRESSION: CPU was {old_cpu['median']:.2f} ms"
            lines.append(line)
    return lines
