"""The gang benchmark's report: figures over repetitions, the tables, issue 12's targets, and
report.md with every definition. Pure, no I/O: given the recorded runs, it returns text.

Each run (one approach, one scenario, one repetition) is a dict as gang_bench writes it to
runs/r<k>/<scenario>/<approach>/run.json. Every figure is computed per run, then given as
its median over repetitions with min and max (stats.spread). Called by
escher_harness.bench.gang_bench; tested from recorded runs (tests/unit/test_gang_report.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from escher_harness.bench import sampling
from escher_harness.bench.approaches.registry import EXTENDERS
from escher_harness.bench.stats import spread

Run = Mapping[str, Any]


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    get: Callable[[Run], float | None]
    decimals: int = 0


def _lat(p: str) -> Callable[[Run], float | None]:
    return lambda r: (r.get("latency_ms") or {}).get(p)


def _key(k: str) -> Callable[[Run], float | None]:
    return lambda r: r.get(k)


# The processes that decide placements: Kueue's controller too (kueue-tas: its TAS picks
# every member's node, kube-scheduler only binds there).
_SCHEDULING = ("kube-scheduler", "extender", "kueue")


def _scheduling_cpu(r: Run) -> float | None:
    cpu = r.get("cpu_seconds") or {}
    parts = [v for k, v in cpu.items() if k in _SCHEDULING and v is not None]
    return sum(parts) if parts else None


def _cpu_of(component: str) -> Callable[[Run], float | None]:
    return lambda r: (r.get("cpu_seconds") or {}).get(component)


# How the report says the extender approaches were called (a results.json written before
# the footing named its scope was every-pod).
_SCOPES = {
    "split": "as deploy/ does (split: gang members marked at creation, filter over the verbs' "
    "HTTP/1.1 listener, bind over HTTP/2)",
    "every-pod": "for every pod, every exchange, over HTTP/2 (scope every-pod)",
}
# Where the processes ran (--cpu-split, escher_harness.localcluster.cpus).
# Results from before the extender's own half recorded True for the scheduling side.
_CPUS: dict[str | None, str] = {
    None: "Every process may run on every CPU.",
    "scheduling": "CPUs split (--cpu-split): kube-scheduler and the extender on one half of "
    "the machine's CPUs, the rest of the cluster and the load generator on the other.",
    "extender": "CPUs split (--cpu-split extender): the extender and the /healthz probe on "
    "one half of the machine's CPUs, the rest of the cluster (kube-scheduler too) and the "
    "load generator on the other.",
}


def _split(recorded: object) -> str | None:
    if recorded is True:
        return "scheduling"
    return recorded if isinstance(recorded, str) and recorded in _CPUS else None


def _shares(nice: int) -> str:
    """The footing's CPU shares (--extender-nice) in words."""
    if not nice:
        return "Every process has the same share of a saturated CPU (its session's)."
    # Linux's weight per nice step is 1.25x (sched_prio_to_weight).
    return (
        f"The extender's session at autogroup nice {nice} (--extender-nice): about "
        f"{1.25**-nice:.1f}x the share of a saturated CPU that each other process has, as a "
        "larger CPU request gives its pod's cgroup."
    )


def _scheduler_cpu_per_gang(r: Run) -> float | None:
    by = r.get("cpu_seconds") or {}
    cpu = by.get("kube-scheduler")
    gangs = r.get("gangs_submitted")
    kueue = by.get("kueue") or 0.0
    return (cpu + kueue) * 1000 / gangs if cpu is not None and gangs else None


def _placement(k: str) -> Callable[[Run], float | None]:
    return lambda r: (r.get("placement") or {}).get(k)


def _free(k: str) -> Callable[[Run], float | None]:
    return lambda r: (r.get("fragmentation") or {}).get(k)


def _extender(k: str) -> Callable[[Run], float | None]:
    return lambda r: (r.get("extender") or {}).get(k)


FIGURES = (
    Figure("gangs", "gangs", _key("gangs_submitted")),
    Figure("completed", "completed", _key("gangs_completed")),
    Figure("succeeded", "succeeded", _key("gangs_succeeded")),
    Figure("timeouts", "timeouts", _key("timeouts")),
    Figure("rollbacks", "rollbacks", _key("rollbacks")),
    Figure("p50", "p50 ms", _lat("p50"), 1),
    Figure("p90", "p90 ms", _lat("p90"), 1),
    Figure("p99", "p99 ms", _lat("p99"), 1),
    Figure(
        "create_p50",
        "of which creation p50 ms",
        lambda r: (r.get("creation_ms") or {}).get("p50"),
        1,
    ),
    Figure("max_partial", "max partial", _key("max_partial_gangs")),
    Figure("wasted_partial", "wasted partial", _key("wasted_partial_stretches")),
    Figure("longest_partial_ms", "longest partial ms", _key("longest_partial_ms"), 1),
    Figure("partial_pod_s", "partial pod·s", _key("partial_pod_seconds"), 1),
    Figure("placeholder_pod_s", "of which placeholders", _key("placeholder_pod_seconds"), 1),
    Figure("writes_per_gang", "writes/gang", _key("api_writes_per_gang"), 1),
    Figure("scheduling_cpu_s", "sched. CPU s", _scheduling_cpu, 1),
    Figure("replay_lag_ms", "replay lag ms", _key("replay_lag_ms"), 1),
    Figure("warmup_ms", "warm-up ms", lambda r: (r.get("warmup") or {}).get("latency_ms"), 1),
    Figure("load", "load avg", lambda r: (r.get("load_average") or {}).get("mean"), 2),
    Figure("overcommits", "over-commits", _key("overcommits")),
    Figure("in_one_domain", "in one domain %", _placement("in_one_domain_pct"), 1),
    Figure("largest_share", "largest-domain share", _placement("largest_share"), 3),
    Figure("span_rack", "racks / min", _placement("span_ratio_rack"), 2),
    Figure("span_block", "blocks / min", _placement("span_ratio_block"), 2),
    Figure("free_blocks_min", "free blocks min", _free("free_blocks_min")),
    Figure("free_blocks_mean", "free blocks mean", _free("free_blocks_mean"), 1),
    Figure("free_racks_min", "free racks min", _free("free_racks_min")),
    Figure("free_racks_mean", "free racks mean", _free("free_racks_mean"), 1),
    Figure("free_blocks_min_pct", "free blocks min %", _free("free_blocks_min_pct"), 1),
    Figure("free_blocks_mean_pct", "free blocks mean %", _free("free_blocks_mean_pct"), 1),
    Figure("free_racks_min_pct", "free racks min %", _free("free_racks_min_pct"), 1),
    Figure("free_racks_mean_pct", "free racks mean %", _free("free_racks_mean_pct"), 1),
    Figure("sched_cpu_per_gang", "sched. CPU ms/gang", _scheduler_cpu_per_gang, 0),
    Figure("extender_cpu_s", "extender CPU s", _cpu_of("extender"), 1),
    Figure("kcm_cpu_s", "controller-manager CPU s", _cpu_of("kube-controller-manager"), 1),
    Figure("extender_peak_mib", "extender peak MiB", _extender("peak_rss_mib"), 1),
    Figure("longest_stall_ms", "longest stall ms", _extender("longest_stall_ms"), 1),
    Figure("longest_loop_lag_ms", "longest loop lag ms", _extender("longest_loop_lag_ms"), 1),
    Figure("longest_loop_held_ms", "longest loop held ms", _extender("longest_loop_held_ms"), 1),
    Figure("longest_gc_pause_ms", "longest GC pause ms", _extender("longest_gc_pause_ms"), 1),
)
_BY_KEY = {f.key: f for f in FIGURES}
OUTCOME_TABLE = (
    "gangs",
    "completed",
    "succeeded",
    "timeouts",
    "rollbacks",
    "p50",
    "p90",
    "p99",
    "create_p50",
)
COST_TABLE = (
    "max_partial",
    "wasted_partial",
    "longest_partial_ms",
    "partial_pod_s",
    "placeholder_pod_s",
    "writes_per_gang",
    "scheduling_cpu_s",
    "kcm_cpu_s",
    "overcommits",
)
RUN_TABLE = ("replay_lag_ms", "warmup_ms", "load")
# The topology preset's table: latency, completions, placement quality, free whole domains
# (fragmentation) and what it cost.
TOPOLOGY_TABLE = (
    "completed",
    "p50",
    "p99",
    "create_p50",
    "in_one_domain",
    "largest_share",
    "span_rack",
    "span_block",
    "free_blocks_min",
    "free_blocks_mean",
    "free_racks_min",
    "free_racks_mean",
    "sched_cpu_per_gang",
    "extender_cpu_s",
    "extender_peak_mib",
    "longest_stall_ms",
    "longest_loop_lag_ms",
    "longest_loop_held_ms",
    "longest_gc_pause_ms",
)
# The free whole domains of the topology table as a share of all the cluster's.
FRAGMENTATION_TABLE = (
    "free_blocks_min_pct",
    "free_blocks_mean_pct",
    "free_racks_min_pct",
    "free_racks_mean_pct",
)


def aggregate(runs: Sequence[Run]) -> dict[str, dict[str, float]]:
    """Each figure's spread over the runs (repetitions) that have it."""
    out: dict[str, dict[str, float]] = {}
    for f in FIGURES:
        values = [v for r in runs if "error" not in r and (v := f.get(r)) is not None]
        if values:
            out[f.key] = spread([float(v) for v in values])
    return out


def cell(s: Mapping[str, float] | None, decimals: int) -> str:
    if not s:
        return "-"

    def fmt(x: float) -> str:
        return f"{x:.{decimals}f}"

    if s["n"] == 1 or s["min"] == s["max"]:
        return fmt(s["median"])
    return f"{fmt(s['median'])} [{fmt(s['min'])}-{fmt(s['max'])}]"


def table(
    results: Mapping[str, Mapping[str, Any]],
    scenarios: Sequence[str],
    keys: Sequence[str],
    loc: Mapping[str, int | None] | None = None,
) -> str:
    """A markdown table: one row per scenario and approach, one column per figure; each
    cell the median [min-max] over repetitions. `results[approach]` holds `skipped`, or
    `scenarios[name]` = {"figures": aggregate(...), "errors": [...]}."""
    head = ["scenario", "approach", *(_BY_KEY[k].label for k in keys)]
    if loc is not None:
        head.append("policy LOC")
    rows = [head]
    for sc in scenarios:
        for approach, a in results.items():
            if "skipped" in a:
                rows.append([sc, approach, "skipped: " + a["skipped"]] + [""] * (len(head) - 3))
                continue
            r = a["scenarios"].get(sc) or {}
            figs = r.get("figures") or {}
            if not figs and r.get("errors"):
                rows.append(
                    [sc, approach, "error: " + r["errors"][0][:60]] + [""] * (len(head) - 3)
                )
                continue
            cells = [sc, approach, *(cell(figs.get(k), _BY_KEY[k].decimals) for k in keys)]
            if loc is not None:
                cells.append(str(loc.get(approach) if loc.get(approach) is not None else "-"))
            rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


# --- issue 12's targets ------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    name: str
    met: bool | None  # None: not measurable (an approach or scenario missing)
    detail: str


def _per_rep(
    runs: Mapping[str, Mapping[str, Mapping[int, Run]]], sc: str, approach: str, f: str
) -> dict[int, float]:
    fig = _BY_KEY[f]
    out: dict[int, float] = {}
    for rep, r in (runs.get(sc, {}).get(approach) or {}).items():
        if "error" not in r and (v := fig.get(r)) is not None:
            out[rep] = float(v)
    return out


def _compare(
    runs: Mapping[str, Mapping[str, Mapping[int, Run]]],
    mine_is: str,
    name: str,
    sc: str,
    figure: str,
    better: Callable[[float, float], bool],
    peers: Sequence[str],
    relation: str,
) -> Target:
    """Whether `mine_is`'s `figure` relates as `better` to the best of `peers` in every
    repetition that has all of them, and in the medians."""
    name = name.replace("extender", mine_is, 1)
    mine = _per_rep(runs, sc, mine_is, figure)
    theirs = {p: _per_rep(runs, sc, p, figure) for p in peers}
    reps = sorted(set(mine).intersection(*(set(t) for t in theirs.values())))
    if not reps:
        return Target(name, None, f"not measured: {mine_is} or {', '.join(peers)} missing in {sc}")
    pick = min if better(0, 1) else max  # the peers' strongest figure in that repetition
    ok = [better(mine[k], pick(theirs[p][k] for p in peers)) for k in reps]
    med = spread([mine[k] for k in reps])["median"]
    peer_meds = ", ".join(f"{p} {spread([theirs[p][k] for k in reps])['median']:g}" for p in peers)
    detail = (
        f"{mine_is} {med:g} {relation} {peer_meds} (medians over {len(reps)} repetitions); "
        f"held in {sum(ok)} of {len(reps)} repetitions"
    )
    return Target(name, all(ok), detail)


def targets(runs: Mapping[str, Mapping[str, Mapping[int, Run]]]) -> list[Target]:
    """Issue 12's targets, judged repetition by repetition (ratios measured in one run):
    a target is met when it holds in every repetition. `runs[scenario][approach][rep]`.
    Judged for the extender, and for the extender with the gang gate when it ran."""
    ran = {a for by in runs.values() for a in by}
    out: list[Target] = []
    # Issue 12's targets compare the paired presets' scenarios; the topology preset has others.
    if not runs or runs.keys() & {"no-contention", "contention"}:
        out += [
            t
            for mine in EXTENDERS
            if mine in ran or mine == "extender"
            for t in _targets(runs, mine)
        ]
    if runs.keys() & {"no-topology", "required", "preferred"}:
        for mine in (m for m in EXTENDERS if m in ran):
            out += [_no_wasted_partial(runs, mine)]
            if "required" in runs:
                out += [_required_topology(runs, mine)]
    over = _no_overcommit(runs)
    return out if over.met is None else [*out, over]


def _no_overcommit(runs: Mapping[str, Mapping[str, Mapping[int, Run]]]) -> Target:
    """Issue 28: never an over-committed node, in any run of any approach."""
    seen = [
        (sc, a, rep, r["overcommits"])
        for sc, by in runs.items()
        for a, reps in by.items()
        for rep, r in reps.items()
        if "error" not in r and r.get("overcommits") is not None
    ]
    name = "every run: no node over-committed (bound, unfinished pods within its cpu and memory)"
    if not seen:
        return Target(name, None, "not measured")
    bad = [f"{a} {sc} r{rep}: {n}" for sc, a, rep, n in seen if n]
    return Target(
        name,
        not bad,
        f"checked in {len(seen)} runs; over-committing bindings: {', '.join(bad) or 'none'}",
    )


def _no_wasted_partial(runs: Mapping[str, Mapping[str, Mapping[int, Run]]], mine: str) -> Target:
    """Issue 28: never a partial gang outliving its bind burst, in any run: every partially
    bound gang of `mine` completes, in every scenario."""
    wasted = {
        f"{sc} r{rep}": v
        for sc in runs
        for rep, v in _per_rep(runs, sc, mine, "wasted_partial").items()
    }
    name = f"every scenario: {mine}'s partially bound gangs all complete (bind bursts only)"
    if not wasted:
        return Target(name, None, "not measured")
    longest = {
        f"{sc} r{rep}": v
        for sc in runs
        for rep, v in _per_rep(runs, sc, mine, "longest_partial_ms").items()
    }
    return Target(
        name,
        all(v == 0 for v in wasted.values()),
        f"partial stretches not ending complete: {wasted}; longest partial stretch ms: {longest}",
    )


def _required_topology(runs: Mapping[str, Mapping[str, Mapping[int, Run]]], mine: str) -> Target:
    """Issue 28: with required topology, every gang in one domain of its level."""
    values = _per_rep(runs, "required", mine, "in_one_domain")
    name = f"required: {mine} places 100% of gangs inside one domain of their level"
    if not values:
        return Target(name, None, "not measured")
    return Target(
        name,
        all(v == 100.0 for v in values.values()),
        f"% per repetition: {[values[k] for k in sorted(values)]}",
    )


def _targets(runs: Mapping[str, Mapping[str, Mapping[int, Run]]], mine: str) -> list[Target]:
    le = lambda a, b: a <= b  # noqa: E731 - the relation is the data here
    ge = lambda a, b: a >= b  # noqa: E731
    out = [
        _compare(
            runs,
            mine,
            "no contention: extender p50 <= the lower of Coscheduling's and native's p50",
            "no-contention",
            "p50",
            le,
            ("coscheduling", "native"),
            "ms vs",
        ),
        _compare(
            runs,
            mine,
            "contention: extender completes at least as many gangs as native",
            "contention",
            "completed",
            ge,
            ("native",),
            "vs",
        ),
    ]
    # "Max partial no higher than the bind burst": the extender's partially bound gangs must
    # all be gangs in their bind burst, i.e. every partial stretch ends with the gang complete.
    wasted = _per_rep(runs, "contention", mine, "wasted_partial")
    name = f"contention: {mine} max partial only from bind bursts"
    if wasted:
        mp = _per_rep(runs, "contention", mine, "max_partial")
        longest = _per_rep(runs, "contention", mine, "longest_partial_ms")
        out.append(
            Target(
                f"{name} (every partially bound gang completes)",
                all(v == 0 for v in wasted.values()),
                f"partial stretches not ending complete: {sorted(wasted.values())} per "
                f"repetition; max partial {sorted(mp.values())}, longest partial stretch "
                f"{sorted(longest.values())} ms",
            )
        )
    else:
        out.append(Target(name, None, "not measured"))
    out += [
        _compare(
            runs,
            mine,
            "contention: extender partial pod-seconds <= native's",
            "contention",
            "partial_pod_s",
            le,
            ("native",),
            "vs",
        ),
        _compare(
            runs,
            mine,
            "contention: extender API writes per gang <= native's",
            "contention",
            "writes_per_gang",
            le,
            ("native",),
            "vs",
        ),
    ]
    return out


def targets_md(ts: Sequence[Target]) -> str:
    mark = {True: "met", False: "NOT met", None: "not measured"}
    return "\n".join(f"- **{mark[t.met]}**: {t.name}. {t.detail}." for t in ts)


# --- report.md ---------------------------------------------------------------------------

DEFINITIONS = """\
- **Latency**: from a gang's submission to its last member bound, the same for every
  approach. Submission is the load generator's first API call for the gang: the PodGroup's
  creation (coscheduling, native), the first member's creation (extender, default), the
  first cluster-state read of the planning (pure, pure-ghost, dra: they work before any pod
  exists, and that counts). "Bound" is the moment the run's one pod watch first sees
  spec.nodeName, the same watch for every approach. p50/p90/p99 are nearest-rank percentiles
  of one run's completed gangs; the table gives their median [min-max] over repetitions.
  **Of which creation**: the p50 of the part before the last member exists (submission to
  the load generator's last member create, one create at a time as for every approach; the
  pure approaches' policy calls included): the API server's admission of the members, which
  deploy/'s admission policies (markers, gang gate) add to.
- **Completed**: all of a gang's members bound at once, before its deadline. **Succeeded**:
  the completed gang then ran its run time (kwok) and every member was seen Succeeded.
  **Timeouts**: gangs not complete by their deadline; their pods (and groups) are deleted.
- **Rollbacks**: attempts an approach undid after writing to the API (the pure approaches and dra
  delete an attempt's pods and resource, or placeholders that did not all bind, and retry).
  Attempts undone in a scheduler's memory (the extender's expired reservations,
  Coscheduling's permit rejections) write nothing and are not counted here.
- **Max partial**: the most gangs at one moment with some but not all members bound (members
  only: a placeholder is not a member). **Wasted partial**: partial stretches that ended
  otherwise than by the gang completing (members deleted by a rollback or at the deadline).
  **Longest partial**: the longest such stretch, completing or not (a gang bound member by
  member by the Binding API is partial for its bind burst).
- **Partial pod·s**: pod-seconds of pods bound for gangs not yet complete: members of
  partial gangs and placeholders (pure-ghost), both holding room nothing can use yet; the
  placeholders' share is given alone. Room held without a pod (the extender's in-memory
  reservations, a scheduler's assumed pods at permit) is invisible to the API and not counted.
- **Writes/gang**: kube-apiserver's own `apiserver_request_total` for POST, PUT, PATCH,
  DELETE and APPLY, between the clock's start and the end of the run, divided by the gangs
  submitted; events and leases are left out. Included: the load generator's creates,
  run-time patches and deletes, the PodGroups (peers), bindings and pod status patches by
  the scheduler, the extender's bindings and node status patches (dra: its ResourceSlices and
  DeviceClasses, and kube-scheduler's ResourceClaims and their status, and the claims'
  deletion by kube-controller-manager), and kwok's pod status (Running, Succeeded) and node
  heartbeat patches. A completed gang costs more writes than a
  given-up one (it runs), so more completions raise this figure; results.json has the
  breakdown per verb and resource.
- **Sched. CPU s**: CPU seconds used by kube-scheduler, (extender mode) the extender and
  (kueue-tas) Kueue's controller from the launch of the load generator to its end (the
  warm-up gang included).
  **Controller-manager CPU s**: kube-controller-manager's over the same span (dra only: its
  garbage collector and resource-claim controller delete and release the members' claims).
- **Policy LOC**: non-blank, non-comment, non-docstring lines of the gang logic. extender:
  the `extender/gang/` package and `filters/reservation.py` (Python, inside the extender);
  pure, pure-ghost and dra: the gang ESL `extender/esl/gang.py` and the runner
  `bench/puregang.py` (Python library plus application code; both variants are in the same
  files); coscheduling: scheduler-plugins' `pkg/coscheduling` (Go, tests excluded); native:
  Kubernetes' `pkg/scheduler/framework/plugins/gangscheduling` (Go, tests excluded; the
  framework's own gang machinery elsewhere in kube-scheduler is not counted); kueue-tas:
  Kueue's TAS (`pkg/cache/scheduler/tas_*`, `pkg/scheduler/flavorassigner/tas_*`,
  `pkg/controller/tas`, `pkg/util/tas`; Go, tests excluded).
- **Over-commits**: bindings the run's pod watch saw put a node's bound, unfinished pods
  (members, placeholders, any pod) above its cpu or memory; never expected, from any approach.
- **Topology** (preset `topology`): nodes labelled into racks, blocks and zones; each gang's *level*
  is the smallest whose largest domain holds it on empty nodes (rack, else block). Scenario
  `required`/`preferred`: the gang asks for its level (extender: the annotation
  `escher.io/gang-required-topology` / `gang-preferred-topology`; native: its PodGroup's
  `schedulingConstraints.topology`, required only, with the alpha gate
  TopologyAwareWorkloadScheduling on for native in every scenario of the preset; pure: the gang
  ESL's `required_topology` / `preferred_topology` parameter, used only if the ESL knows it, see the
  notes; kueue-tas: a Job whose PodSet is annotated `kueue.x-k8s.io/podset-required-topology` /
  `podset-preferred-topology`, Kueue's TAS then choosing every member's node; Coscheduling and
  default: no topology). From the nodes of each gang's members when it was first complete: **in one
  domain %**, the gangs whose members are all in one domain of their level; **largest-domain
  share**, the mean over gangs of the share of its members in its largest domain of its level
  (flux-core's figure: 1.0 = all in one); **racks / min** and **blocks / min**, the mean over gangs
  of the domains spanned at that level over the fewest that could hold it (ceil of members over what
  one full domain holds on empty nodes; 1.0 = as few as possible). Computed in every scenario, so
  `no-topology` shows where gangs land unasked.
- **Free whole domains** (preset `topology`; fragmentation): a rack or block is *free* while
  no pod holds any of its nodes; a pod holds its node from the moment the pod watch first
  sees it bound (member or placeholder) until it sees it Succeeded or deleted. Every domain
  of the cluster counts, the smaller last one of a level too. Over the run's *window*, from
  the first gang's submission to the last gang's end (done or given up), the free count is a
  step function changing only at the log's events, so nothing is sampled: **free blocks /
  racks min** is its minimum over the window, **mean** its time-weighted mean (the integral
  over the window divided by its length), each also as a % of the level's domains. The
  window's edges count: all is free until the first member binds and after the last leaves,
  which in a short run is much of what a level with few domains shows. Packing
  gangs into few domains keeps whole racks and blocks free for later large gangs (a gang of
  1,024 needs a whole empty block); spreading leaves none. `fragmentation.png` draws the
  counts over time, a line per repetition. Runs without topology have none (not zero).
- **Sched. CPU ms/gang**: kube-scheduler's CPU (kueue-tas: and Kueue's) over the run
  divided by the gangs submitted.
  **Extender CPU s**: the extender's CPU over the run (extender and pure approaches, dra).
  **Extender peak MiB**: its largest resident set, sampled every second. **Longest stall**:
  its slowest /healthz answer, probed every 50 ms through the run from a process of its own
  (the probe's round trip included): how long its event loop was held at most, as a client
  sees it. **Longest loop lag**: the extender's own figure,
  escher_event_loop_lag_max_seconds at the end of the run (a timer on its loop every 50 ms,
  how late it fired): the same, without the probe's round trip and the load generator's
  process, which shares the two cores. **Longest loop held**:
  escher_event_loop_held_max_seconds, the longest lag bounded by the CPU the extender's loop
  thread used while it was late: at most this much of a lag was the loop's own work, the
  rest it waited to be run on a saturated machine (or for the GIL, while a worker thread
  planned). **Longest GC pause**: escher_gc_pause_max_seconds, its
  longest collection of generation 1 or 2 (CPython's garbage collector stops the thread
  that triggered it, most often the event loop's).
- **Replay lag**: the latest any gang was submitted after its planned time (how faithful
  the open-loop replay was). **Warm-up**: the uncounted first gang's latency (the cold
  start). **Load avg**: the machine's 1-minute load average during the run (mean)."""


def notes(results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What the runs noticed about the approaches (e.g. the pure runner's ignored topology
    parameters), once per approach and note."""
    out: list[str] = []
    for approach, a in results.items():
        seen: dict[str, str] = {}
        for per in (a.get("scenarios") or {}).values():
            for rep in (per.get("repetitions") or {}).values():
                seen.update(rep.get("notes") or {})
        out += [f"{approach}: {k} ({why})" for k, why in sorted(seen.items())]
    return out


def _topology_section(doc: Mapping[str, Any], tables: Mapping[str, str]) -> str:
    if "topology" not in tables:
        return ""
    noticed = notes(doc["approaches"])
    said = "\n".join(f"- {n}" for n in noticed) or "- none"
    of = doc.get("domains") or {}
    share = ""
    if "fragmentation" in tables:
        share = (
            f"\nFree whole domains as a % of all the cluster's (blocks: {of.get('block', '?')}, "
            f"racks: {of.get('rack', '?')}):\n\n{tables['fragmentation']}\n"
        )
    return f"""
Topology: latency, placement quality, free whole domains and cost (definitions below):

{tables["topology"]}
{share}
Topology per approach: extender approaches carry the annotation; native the PodGroup's
required constraint (it has no preferred one: in `preferred` it runs without); Coscheduling
and default have no topology. Noticed in the runs:

{said}
"""


def report_md(doc: Mapping[str, Any], tables: Mapping[str, str], ts: Sequence[Target]) -> str:
    p = doc["preset"]
    f = p["footing"]
    env = doc["environment"]
    work = "\n".join(
        f"- **{w['scenario']['name']}** ({len(w['arrivals'])} gangs, trace `{w['digest']}`): "
        f"gang sizes `{w['scenario']['sizes']}`, member cpu/memory `{w['scenario']['shapes']}`, "
        f"run time `{w['scenario']['run_time']}` s, Poisson arrivals at "
        f"{w['scenario']['rate']:g}/s for {w['scenario']['duration']:g} s, deadline "
        f"{w['scenario']['deadline']:g} s (pure approaches: {w['scenario']['attempt_timeout']:g} s "
        f"per attempt); offered load {w['offered_cpu']:.0f} cpu of {w['capacity_cpu']:.0f}."
        for w in doc["workloads"].values()
    )
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items())
    order = "; ".join(f"repetition {k}: {' '.join(o)}" for k, o in doc["order"].items())
    return f"""# Gang scheduling: {len(doc["approaches"])} approaches, one replayed workload

`{doc["command"]}`, started {doc["started"]}, {doc["duration_s"]:g} s in all.
Preset **{p["name"]}**{": " + p["note"] if p["note"] else ""}. Seed **{p["seed"]}**,
**{doc["repetitions"]} repetition(s)**: every cell is the median [min-max] over them.

## Workload (generated once from the seed, replayed by every approach)

{work}

Every approach replays exactly these arrivals from a common start: the cluster is started,
the pod watch listed, and one warm-up gang (uncounted, the same for every approach) run
before the clock starts. A complete gang's members then get their run time (the job starts
at its rendezvous) and kwok makes them Succeeded that long after, freeing their room; a gang
not complete by its deadline is deleted.

## Equal footing

A fresh local control plane per run: etcd, kube-apiserver, kube-scheduler (for
coscheduling: scheduler-plugins' build of it), kwok as the kubelets of {f["nodes"]} nodes of
{f["node_cpu"]} cpu / {f["node_memory"]}. Every scheduler's clientConnection is qps
{f["client_qps"]:g} / burst {f["client_burst"]} and so is the extender's own client.
{sampling.sentence(f.get("percentage_of_nodes_to_score", 100))} kwok's client has no
rate limit (kwok's own default). The extender approaches call the extender
{_SCOPES[f.get("extender_scope", "every-pod")]}.
{_CPUS[_split(f.get("cpu_split"))]} {_shares(int(f.get("extender_nice") or 0))}
Order: approaches interleaved, the first one rotating each repetition ({order}).

Versions: {versions}. Machine: {env["machine"]["cores"]} cores, {env["machine"]["platform"]};
load average per run in the last table. The machine is shared: compare approaches within a
repetition (ratios), not absolute times across reports.

## Results

Outcome:

{tables["outcome"]}

What it cost the cluster:

{tables["cost"]}

The runs themselves:

{tables["run"]}
{_topology_section(doc, tables)}
Plots: `latency_cdf.png` (a line per repetition), `partial_gangs.png`, `completions.png`
(topology preset: also `placement.png` and `fragmentation.png`).
Raw logs, per-run results and the extender's /metrics are under `runs/`.

## Issue 12's targets (each judged per repetition, on one workload)

{targets_md(ts)}

## Definitions

{DEFINITIONS}
"""
