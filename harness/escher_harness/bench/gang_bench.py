"""`escher-extender bench gang --out DIR`: gang scheduling, five approaches, one workload.

For each approach (escher_harness.bench.approaches) and each scenario (no contention; demand above
capacity, so gangs must queue) on a fresh local control plane: drive gang arrivals with locust
(loadtests/gang_locustfile.py), record the event trace, read kube-apiserver's write counter
before and after, and compute every figure from the trace (escher_harness.bench.trace). Writes
DIR/results.json, DIR/report.md, DIR/latency_cdf.png, DIR/partial_gangs.png and the raw
traces, and prints the comparison table. Called by extender.cli (and so by `make demo`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from escher_harness import localcluster
from escher_harness.bench import approaches, trace
from escher_harness.bench.apimetrics import write_requests
from escher_harness.kubeclient import api_client

LOCUSTFILE = approaches.REPO / "loadtests" / "gang_locustfile.py"


@dataclass(frozen=True)
class Scenario:
    name: str
    size: int  # members per gang (all required: min = size)
    cpu: str  # per member
    memory: str
    rate: float  # gangs per second
    hold: float  # seconds a complete gang runs before it is deleted
    seconds: float  # how long gangs keep arriving
    deadline: float  # a gang not complete by then is given up
    attempt_timeout: float  # pure approach, per attempt


@dataclass(frozen=True)
class Workload:
    nodes: int
    node_cpu: str
    node_memory: str
    scenarios: tuple[Scenario, ...]


def workload(
    quick: bool,
    seconds: float | None = None,
    size: int = 4,
    rate: float | None = None,
    nodes: int = 8,
) -> Workload:
    """Nodes of 8 cpu. No contention: demand is a quarter of capacity. Contention: gangs of
    twice the cpu arrive four times as often, so demand is about twice capacity."""
    secs = seconds or (10.0 if quick else 60.0)
    base = rate or 0.5
    deadline = 15.0 if quick else 30.0
    return Workload(
        nodes=nodes,
        node_cpu="8",
        node_memory="32Gi",
        scenarios=(
            Scenario("no-contention", size, "1", "1Gi", base, 4.0, secs, deadline, 5.0),
            Scenario("contention", size, "2", "2Gi", base * 4, 6.0, secs, deadline, 5.0),
        ),
    )


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def unavailable(approach: str) -> str | None:
    """Why an approach cannot run here, or None."""
    if approach == "coscheduling":
        spec = approaches.cluster_spec(approach, Path("/"), 1, "1", "1Gi")
        if (
            spec.scheduler_binary is None
            or not spec.scheduler_binary.exists()
            or not spec.manifests
        ):
            return "kube-scheduler-plugins or its PodGroup CRD is not built: run `make peers`"
    return None


def run_one(approach: str, wl: Workload, sc: Scenario, out: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"escher-gang-{approach}-") as tmp:
        spec = approaches.cluster_spec(
            approach, Path(tmp) / "c", wl.nodes, wl.node_cpu, wl.node_memory
        )
        info = localcluster.up(spec)
        try:
            api = api_client(info.kubeconfig)
            path = out / "traces" / f"{approach}-{sc.name}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
            cfg = {
                "approach": approach,
                "cluster_dir": str(info.dir),
                "trace": str(path),
                **asdict(sc),
            }
            before = write_requests(api)
            _locust(cfg, sc, path, f"{approach}/{sc.name}")
            writes = write_requests(api) - before
        finally:
            localcluster.down(info.dir)
    f = trace.figures(trace.load(path))
    result = f.to_json()
    result["api_writes_per_gang"] = (
        round(writes / f.gangs_submitted, 1) if f.gangs_submitted else None
    )
    result["api_writes"] = writes
    result["latencies_ms"] = f.latencies_ms
    result["partial_series"] = f.partial_series
    return result


def _locust(cfg: dict[str, Any], sc: Scenario, path: Path, label: str) -> None:
    env = {**os.environ, "ESCHER_GANG_BENCH": json.dumps(cfg)}
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--headless",
        "-u",
        "1",
        "-r",
        "1",
        "-t",
        f"{max(1, round(sc.seconds))}s",  # locust takes whole seconds
        "--only-summary",
        "--loglevel",
        "WARNING",
    ]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(proc.stdout or []), daemon=True)
    reader.start()
    started = time.monotonic()
    while proc.poll() is None:
        time.sleep(5)
        counts = {
            k: path.read_text().count(f'"kind": "{k}"') for k in ("submit", "done", "timeout")
        }
        _say(
            f"{label}: {time.monotonic() - started:.0f}s, {counts['submit']} gangs submitted, "
            f"{counts['done']} done, {counts['timeout']} given up"
        )
    reader.join(5)
    # locust exits 1 when any request failed (a gang given up): that is a result, not an error
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"locust failed ({proc.returncode}): {''.join(output)[-3000:]}")


def run(out: Path, wl: Workload, which: Sequence[str] = approaches.APPROACHES) -> int:
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    loc = approaches.policy_loc()
    results: dict[str, Any] = {}
    for approach in which:
        why = unavailable(approach)
        if why:
            _say(f"{approach}: skipped: {why}")
            results[approach] = {"skipped": why, "policy_loc": loc.get(approach)}
            continue
        per: dict[str, Any] = {}
        for sc in wl.scenarios:
            _say(f"{approach}/{sc.name}: starting a fresh control plane")
            try:
                per[sc.name] = run_one(approach, wl, sc, out)
            except (localcluster.ClusterError, RuntimeError) as e:
                _say(f"{approach}/{sc.name}: failed: {e}")
                per[sc.name] = {"error": str(e)}
        headline = per.get("contention", {})
        results[approach] = {
            **{k: v for k, v in headline.items() if k not in ("latencies_ms", "partial_series")},
            "policy_loc": loc.get(approach),
            "scenarios": per,
        }
    doc = {
        "workload": {**asdict(wl), "headline_scenario": "contention"},
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "duration_s": round(time.time() - started, 1),
        "approaches": results,
    }
    slim = json.loads(json.dumps(doc))
    for a in slim["approaches"].values():
        for s in a.get("scenarios", {}).values():
            s.pop("latencies_ms", None)
            s.pop("partial_series", None)
    (out / "results.json").write_text(json.dumps(slim, indent=2) + "\n")
    table = report_table(slim)
    (out / "report.md").write_text(report_md(slim, table))
    _plots(out, doc)
    print(table)
    print(f"\nwrote {out / 'results.json'}, {out / 'report.md'} and plots in {out}")
    return 0


COLUMNS = [
    ("approach", None),
    ("scenario", None),
    ("gangs", "gangs_submitted"),
    ("completed", "gangs_completed"),
    ("p50 ms", "p50"),
    ("p90 ms", "p90"),
    ("p99 ms", "p99"),
    ("max partial", "max_partial_gangs"),
    ("partial pod·s", "partial_pod_seconds"),
    ("rollbacks", "rollbacks"),
    ("timeouts", "timeouts"),
    ("writes/gang", "api_writes_per_gang"),
    ("policy LOC", "policy_loc"),
]


def report_table(doc: dict[str, Any]) -> str:
    rows = [[c for c, _ in COLUMNS]]
    for approach, a in doc["approaches"].items():
        if "skipped" in a:
            rows.append([approach, "skipped", a["skipped"]] + [""] * (len(COLUMNS) - 3))
            continue
        for sc, r in a["scenarios"].items():
            if "error" in r:
                rows.append([approach, sc, "error: " + r["error"][:60]] + [""] * (len(COLUMNS) - 3))
                continue
            lat = r.get("latency_ms") or {}
            cells = [approach, sc]
            for _, key in COLUMNS[2:]:
                v = a["policy_loc"] if key == "policy_loc" else lat.get(key, r.get(key))
                cells.append("-" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v))
            rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def report_md(doc: dict[str, Any], table: str) -> str:
    wl = doc["workload"]
    scen = "\n".join(
        f"- **{s['name']}**: gangs of {s['size']} x ({s['cpu']} cpu, {s['memory']}), "
        f"{s['rate']:g} gangs/s for {s['seconds']:g}s, each held {s['hold']:g}s once complete, "
        f"given up after {s['deadline']:g}s"
        for s in wl["scenarios"]
    )
    return f"""# Gang scheduling: extender vs pure ephemeral resources vs baselines and peers

Run {doc["started"]} ({doc["duration_s"]:g}s) with `escher-extender bench gang`.

Cluster: a fresh local control plane per run (real etcd, kube-apiserver, kube-scheduler
v1.37.2, kwok v0.8.0 as the kubelets), {wl["nodes"]} fake nodes of {wl["node_cpu"]} cpu /
{wl["node_memory"]}.
Arrivals driven by locust (open loop, one arrival every 1/rate seconds):
{scen}

Latency: from a gang's submission to its last member bound. *Max partial*: most gangs with
some but not all members bound at one moment. *Partial pod·s*: pod-seconds held by
incomplete gangs. *Writes/gang*: kube-apiserver write requests (events and leases excluded)
during the run per gang submitted; they include kwok's (a pod status patch per bound pod, a
node status patch per node every 20-45 s), the same for every approach per pod and second.
*Policy LOC*: non-blank, non-comment lines of the gang logic (extender: the extender/gang
package and filters/reservation.py; pure: esl/gang.py and the harness's pod runner
bench/puregang.py; peers: their plugin packages from the Go module cache).

{table}

Figures are computed from the recorded traces in `traces/` (escher_harness/bench/trace.py).
"""


def _plots(out: Path, doc: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = [s["name"] for s in doc["workload"]["scenarios"]]
    fig, axes = plt.subplots(1, len(scenarios), figsize=(12, 4.5), sharey=True)
    for ax, sc in zip(axes, scenarios, strict=True):
        for approach, a in doc["approaches"].items():
            lat = a.get("scenarios", {}).get(sc, {}).get("latencies_ms") or []
            if lat:
                ax.plot(lat, [(i + 1) / len(lat) for i in range(len(lat))], label=approach)
        ax.set_title(f"gang latency CDF: {sc}")
        ax.set_xlabel("submit -> last member bound (ms)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("fraction of completed gangs")
    fig.tight_layout()
    fig.savefig(out / "latency_cdf.png", dpi=120)
    plt.close(fig)

    fig, axes = plt.subplots(1, len(scenarios), figsize=(12, 4.5), sharey=True)
    for ax, sc in zip(axes, scenarios, strict=True):
        for approach, a in doc["approaches"].items():
            series = a.get("scenarios", {}).get(sc, {}).get("partial_series") or []
            if series:
                xs = [t for t, _ in series]
                ys = [c for _, c in series]
                ax.step(xs, ys, where="post", label=approach)
        ax.set_title(f"partially bound gangs over time: {sc}")
        ax.set_xlabel("seconds since the first event")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("gangs with some but not all members bound")
    fig.tight_layout()
    fig.savefig(out / "partial_gangs.png", dpi=120)
    plt.close(fig)


def quick_workload() -> Workload:
    return replace(workload(quick=True), nodes=4)
