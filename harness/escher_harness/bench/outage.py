"""The API server paused under policy and binding load: `escher-extender bench outage`.

Each run starts a fresh embedded cluster as deploy/ runs it (mode extender, the split, one
replica, policies kept as objects), gives every node a slot resource (`SLOTS` a node), and
runs two loads: pods that each take a slot, created every `POD_PERIOD` seconds and `BURST`
right before the pause, so that kube-scheduler binds during it (kwok runs them until the
end, so the slots fill and later pods wait), and policy changes (`PUT /v1/resources/outage-c<i>`
on every node) from `WRITERS` clients back to back. Once both move, kube-apiserver is paused
(SIGSTOP: its connections hang, the worst kind of outage) for `--pause` seconds (30) and
resumed. The loads stop a few seconds after both moved again, and the run checks:

- every policy call is answered 200 or 202 (applied) or 503 (not confirmed, or refused),
  and calls are still sent, and answered, during the pause;
- every change is on all of its nodes or on none, and the ledger says what the nodes show
  (`converged`); every change answered 200 or 202 is among those on all;
- no node holds more slot pods than its capacity, and every slot is taken once the pods
  created are at least the slots (none leaked by a bind that failed in the outage), or every
  pod created is bound;

and reports, per run, the seconds from the resume to the first change answered 200, to the
first bind, and to convergence, the changes applied and
refused, and the pods bound. `outage.md` and `outage.png` in `--out`.

The pause and the convergence check are shared with tests/e2e/test_apiserver_outage.py
(`paused`, `shown`, `ledger`, `converged`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import statistics
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from escher_harness import localcluster
from escher_harness.bench import environment
from escher_harness.bench.failover import Background, Load
from escher_harness.kubeclient import api_client
from escher_harness.waits import until
from escher_harness.workload import Workload, pod_manifest

PAUSE = 30.0
NODES = 4
SLOTS = 4  # slot capacity of each node: the pods created in a run fill it
POD_PERIOD = 0.25
BURST = 8  # slot pods created right before the pause: kube-scheduler binds them during it
WRITERS = 4
PREFIX = "outage-c"  # the policy changes' names
SLOT = "outage-slots"


# ---- shared with tests/e2e/test_apiserver_outage.py --------------------------------------


def apiserver_pid(cluster: localcluster.ClusterInfo) -> int:
    return next(p.pid for p in cluster.processes if p.name == "kube-apiserver")


@contextlib.contextmanager
def paused(pid: int) -> Iterator[None]:
    """kube-apiserver (or any process) stopped with SIGSTOP for the block, always resumed."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def shown(
    cluster: localcluster.ClusterInfo, work: Workload, prefix: str
) -> dict[str, dict[str, str]]:
    """What each node shows of the resources whose short names start with `prefix`: its
    status (mode extender), or the devices of its complete pools (dra), as quantities."""
    domain = cluster.resource_domain
    if cluster.mode == "dra":
        pools = work.published(domain, f"{domain}/resource")
        return {
            n: {
                f"{domain}/{r}": str(v) for r, v in pools.get(n, {}).items() if r.startswith(prefix)
            }
            for n in cluster.nodes
        }
    return {n: work.node_resources(n, f"{domain}/{prefix}")["allocatable"] for n in cluster.nodes}


def ledger(cluster: localcluster.ClusterInfo, prefix: str) -> dict[str, dict[str, int]]:
    """The extender's capacities of those resources, per node (GET /v1/cluster-state)."""
    headers = {"Authorization": f"Bearer {cluster.token}"}
    with httpx.Client(base_url=cluster.extender_url or "", headers=headers, timeout=30) as c:
        state = c.get("/v1/cluster-state").json()
    full = f"{cluster.resource_domain}/{prefix}"
    return {
        n: {r: u["capacity"] for r, u in state["nodes"][n].items() if r.startswith(full)}
        for n in cluster.nodes
    }


@dataclass(frozen=True)
class Converged:
    applied: frozenset[str]  # the changes on every node, with the value asked
    seconds: float  # from the call to convergence


def converged(
    cluster: localcluster.ClusterInfo,
    work: Workload,
    want: Mapping[str, str],
    prefix: str,
    timeout: float = 60.0,
) -> Converged:
    """Wait until no change of `want` ({full name: quantity}) is on some nodes only and the
    ledger says what the nodes show (right after a resume the nodes may show nothing yet
    while objects the API server took are applied); AssertionError after `timeout`. Checks
    that each change on every node has the value asked."""
    start = time.monotonic()

    def check() -> tuple[frozenset[str], dict[str, dict[str, str]]] | None:
        now = shown(cluster, work, prefix)
        partial = {r for r in want if 0 < sum(r in s for s in now.values()) < len(now)}
        applied = frozenset(r for r in want if all(r in s for s in now.values()))
        mine = ledger(cluster, prefix)
        if partial or any(mine[n] != {r: int(want[r]) for r in applied} for n in cluster.nodes):
            return None
        return applied, now

    seen = until(
        check, "every change on all its nodes or none, the ledger as the nodes", timeout, 0.5
    )
    assert seen is not None
    applied, now = seen
    wrong = {(n, r, s.get(r)) for n, s in now.items() for r in applied if s.get(r) != want[r]}
    assert not wrong, sorted(wrong)[:5]
    return Converged(applied, time.monotonic() - start)


# ---- the campaign --------------------------------------------------------------------------


@dataclass
class Run:
    """One outage; seconds from the resume unless said."""

    changes: int = 0  # policy changes sent
    statuses: dict[int, int] = field(default_factory=dict)  # answers by status (0: no answer)
    applied: int = 0  # changes on every node
    refused: int = 0  # changes on no node
    in_pause: int = 0  # policy calls sent during the pause
    longest_call: float = 0.0  # the longest of them
    first_change: float = float("nan")  # the first change answered 200
    first_bind: float = float("nan")  # the first bind the API server made after the resume
    converged: float = float("nan")
    pods: int = 0  # pods created
    bound: int = 0
    most_on_a_node: int = 0
    violations: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Call:
    name: str
    capacity: int
    sent: float  # time.monotonic()
    answered: float
    status: int  # 0: no answer (a transport error)


class Policies(Background):
    """`WRITERS` clients setting new resources on every node back to back."""

    join_seconds = 90.0  # a call may wait out its 60 s timeout

    def __init__(self, cluster: localcluster.ClusterInfo, writers: int = WRITERS) -> None:
        self.cluster = cluster
        self.calls: list[Call] = []
        self.stop = threading.Event()
        self._names = itertools.count()
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._write, daemon=True) for _ in range(writers)]

    def _write(self) -> None:
        headers = {"Authorization": f"Bearer {self.cluster.token}"}
        with httpx.Client(
            base_url=self.cluster.extender_url or "", headers=headers, timeout=60
        ) as c:
            while not self.stop.is_set():
                i = next(self._names)
                name, capacity = f"{PREFIX}{i}", 1 + i % 3
                sent = time.monotonic()
                try:
                    status = c.put(f"/v1/resources/{name}", json={"capacity": capacity}).status_code
                except httpx.HTTPError:
                    status = 0
                with self._lock:
                    self.calls.append(Call(name, capacity, sent, time.monotonic(), status))

    def ok_after(self, t: float) -> float | None:
        with self._lock:
            times = [c.answered for c in self.calls if c.sent > t and c.status == 200]
        return min(times) if times else None


class SlotPods(Load):
    """The failover bench's load, each pod taking one slot."""

    def __init__(self, work: Workload, domain: str) -> None:
        super().__init__(work, period=POD_PERIOD, label="outage")
        self.domain = domain

    def manifest(self, name: str) -> dict[str, Any]:
        return pod_manifest(
            name, limits={f"{self.domain}/{SLOT}": "1"}, labels={"load": self.label}
        )


def _first_bind_after(work: Workload, pods: Load, stopped: float, resumed: float) -> float:
    """Seconds from the resume to the first bind the API server made after it, as the watch
    saw it (NaN: none). The API server's own time of each bind (PodScheduled's transition,
    to the second) tells those from the binds it made just before the pause, which the
    watch may deliver only after the resume."""
    after = []
    for pod in work.core.list_namespaced_pod("default", label_selector="load=outage").items:
        for c in (pod.status.conditions if pod.status else None) or []:
            t = c.last_transition_time
            ok = c.type == "PodScheduled" and c.status == "True"
            if ok and t is not None and t.timestamp() >= int(stopped) + 1 and pod.metadata:
                after.append(pod.metadata.name)
    seen = [pods.bound[n] - resumed for n in after if n in pods.bound]
    return max(0.0, min(seen)) if seen else float("nan")


def _put(cluster: localcluster.ClusterInfo, name: str, body: dict[str, Any]) -> None:
    headers = {"Authorization": f"Bearer {cluster.token}"}
    r = httpx.put(
        f"{cluster.extender_url}/v1/resources/{name}", json=body, headers=headers, timeout=60
    )
    assert r.status_code == 200, (r.status_code, r.text)


def one(out: Path, pause: float = PAUSE, say: Any = print) -> Run:
    spec = localcluster.ClusterSpec(dir=out, nodes=NODES, mode="extender")
    cluster = localcluster.up(spec)
    run = Run()
    try:
        work = Workload(api_client(cluster.kubeconfig))
        _put(cluster, SLOT, {"capacity": SLOTS})
        with SlotPods(work, cluster.resource_domain) as pods, Policies(cluster) as policies:
            start = time.monotonic()
            until(
                lambda: policies.ok_after(start) and len(pods.bound) >= 3,
                "the loads move before the pause",
                60,
            )
            for i in range(BURST):
                pods.create(f"burst-{i}")
            say(f"  loads moving; kube-apiserver paused for {pause:g}s")
            stopped, stopped_wall = time.monotonic(), time.time()
            with paused(apiserver_pid(cluster)):
                time.sleep(pause)  # the outage itself
            resumed, resumed_wall = time.monotonic(), time.time()
            try:
                first = until(lambda: policies.ok_after(resumed), "a change answered 200", 120)
                assert first is not None
                run.first_change = first - resumed
            except AssertionError as e:
                run.violations.append(f"not recovered: {e}")
            time.sleep(3)  # load after the recovery too
        run.first_bind = _first_bind_after(work, pods, stopped_wall, resumed_wall)
        with policies._lock:
            calls = list(policies.calls)
        _check_calls(run, calls, stopped, resumed)
        _check_converged(run, cluster, work, calls, resumed)
        _check_slots(run, work, pods)
    finally:
        with contextlib.suppress(ProcessLookupError, StopIteration):
            os.kill(apiserver_pid(cluster), signal.SIGCONT)  # never torn down paused
        localcluster.down(out, keep_logs=True)
    return run


def _check_calls(run: Run, calls: list[Call], stopped: float, resumed: float) -> None:
    """Every policy call answered, some of them sent during the pause."""
    run.changes = len(calls)
    for c in calls:
        run.statuses[c.status] = run.statuses.get(c.status, 0) + 1
    during = [c.answered - c.sent for c in calls if stopped <= c.sent < resumed]
    run.longest_call = max(during, default=0.0)
    run.in_pause = len(during)
    # Every call is answered: 200 or 202 (applied), 503 (not confirmed, or refused).
    odd = {s: n for s, n in run.statuses.items() if s not in (200, 202, 503)}
    if odd:
        run.violations.append(f"answers other than 200, 202, 503 (0: none): {odd}")
    if not during:
        run.violations.append("no policy call was sent during the pause: the writers hung")


def _check_converged(
    run: Run,
    cluster: localcluster.ClusterInfo,
    work: Workload,
    calls: list[Call],
    resumed: float,
) -> None:
    """Every change on all its nodes or none, and none answered 200/202 on no node."""
    domain = cluster.resource_domain
    want = {f"{domain}/{c.name}": str(c.capacity) for c in calls}
    try:
        conv = converged(cluster, work, want, PREFIX, timeout=120)
    except AssertionError as e:
        run.violations.append(f"not converged: {e}")
    else:
        run.converged = time.monotonic() - resumed
        run.applied, run.refused = len(conv.applied), len(want) - len(conv.applied)
        lost = [c.name for c in calls if c.status in (200, 202)]
        lost = [n for n in lost if f"{domain}/{n}" not in conv.applied]
        if lost:
            run.violations.append(f"answered 200/202 but on no node: {lost[:5]}")


def _check_slots(run: Run, work: Workload, pods: Load) -> None:
    """The slot pods bound as far as the slots go, no node over its slots."""
    run.pods = len(pods.created)
    expect = min(run.pods, SLOTS * NODES)

    def placed() -> dict[str, str | None] | None:
        where = work.nodes(list(pods.created))
        return where if sum(v is not None for v in where.values()) >= expect else None

    try:
        where: dict[str, str | None] | None = until(placed, f"{expect} slot pods bound", 60, 0.5)
    except AssertionError as e:
        run.violations.append(f"slots lost: {e}"[:300])
        where = work.nodes(list(pods.created))
    per_node: dict[str, int] = {}
    for node in (where or {}).values():
        if node is not None:
            per_node[node] = per_node.get(node, 0) + 1
    run.bound = sum(per_node.values())
    run.most_on_a_node = max(per_node.values(), default=0)
    if run.most_on_a_node > SLOTS:
        run.violations.append(f"a node holds {run.most_on_a_node} slot pods of {SLOTS}")
    if run.bound > expect:
        run.violations.append(f"{run.bound} slot pods bound, more than {expect}")


def run(out: Path, runs: int = 5, pause: float = PAUSE) -> tuple[str, bool]:
    """The campaign: `runs` outages, each on a fresh cluster; the report and whether every
    run held."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**environment.machine(), **environment.versions()}
    results: list[Run] = []
    for i in range(runs):
        print(f"outage {i + 1}/{runs}: starting a cluster", flush=True)
        r = one(out / f"run-{i + 1}", pause, say=lambda s: print(s, flush=True))
        results.append(r)
        print(
            f"outage {i + 1}/{runs}: recovered: a change 200 after {r.first_change:.1f}s, a "
            f"bind after {r.first_bind:.1f}s, converged after {r.converged:.1f}s; "
            f"{r.applied} changes applied, {r.refused} refused, {r.bound} of {r.pods} pods "
            f"bound; {'; '.join(r.violations) or 'no violation'}",
            flush=True,
        )
    env["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report = _report(results, pause, env)
    (out / "outage.md").write_text(report)
    _plot(out / "outage.png", results)
    return report, not any(r.violations for r in results)


def _spread(ts: list[float]) -> str:
    ts = [t for t in ts if t == t]  # not the NaNs of a run that failed
    if not ts:
        return "-"
    return f"{statistics.median(ts):.1f} [{min(ts):.1f}-{max(ts):.1f}]"


def _report(results: list[Run], pause: float, env: dict[str, Any]) -> str:
    keys = ("commit", "kubernetes", "etcd", "kwok", "python", "cores")
    lines = [
        f"# kube-apiserver paused {pause:g} s under policy and binding load, {len(results)} runs",
        "",
        f"`escher-extender bench outage --runs {len(results)} --pause {pause:g}`; "
        + ", ".join(f"{k} {env.get(k)}" for k in keys)
        + f"; load average {env['load_average_at_start']} at the start, "
        f"{env['load_average_at_end']} at the end.",
        "",
        f"Each run a fresh cluster (mode extender, the split, one replica, policies as "
        f"objects), {NODES} nodes of {SLOTS} slots, a slot pod every {POD_PERIOD:g} s and "
        f"{BURST} right before the pause, "
        f"{WRITERS} clients setting new resources on every node back to back. Seconds from the "
        "resume to the first change answered 200, to the first bind the API server made "
        "after it (seen by a watch), and to convergence (every change on all its nodes or "
        "none, the ledger as the nodes; checked once the loads stopped, 3 s after the first "
        "change answered 200, so never under 3 s); the changes on every node (applied) and on none "
        "(refused); answers by status (0: none); the policy calls sent during the pause and "
        "the longest of them.",
        "",
        "| run | change 200 | bind | converged | changes | applied | refused | answers | "
        "calls in the pause, longest | pods bound / created | most on a node | violations |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(results, 1):
        answers = ", ".join(f"{s}: {n}" for s, n in sorted(r.statuses.items()))
        lines.append(
            f"| {i} | {r.first_change:.1f} | {r.first_bind:.1f} | {r.converged:.1f} | "
            f"{r.changes} | {r.applied} | {r.refused} | {answers} | "
            f"{r.in_pause}, {r.longest_call:.1f} | "
            f"{r.bound} / {r.pods} | {r.most_on_a_node} of {SLOTS} | "
            f"{'; '.join(r.violations) or 'none'} |"
        )
    lines += [
        "",
        f"Median [min-max]: change 200 {_spread([r.first_change for r in results])} s, bind "
        f"{_spread([r.first_bind for r in results])} s, converged "
        f"{_spread([r.converged for r in results])} s.",
    ]
    return "\n".join(lines) + "\n"


def _plot(path: Path, results: list[Run]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {
        "change 200": [r.first_change for r in results],
        "bind": [r.first_bind for r in results],
        "converged": [r.converged for r in results],
    }
    fig, ax = plt.subplots(figsize=(6, 3))
    for i, ts in enumerate(series.values()):
        ts = [t for t in ts if t == t]
        ax.scatter(ts, [i] * len(ts), color=f"C{i}", zorder=3)
        if ts:
            ax.plot([statistics.median(ts)] * 2, [i - 0.25, i + 0.25], color=f"C{i}", lw=3)
    ax.set_yticks(range(len(series)), list(series))
    ax.set_xlabel("seconds after kube-apiserver resumed (dots: runs, bar: median)")
    ax.set_xlim(left=0)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
