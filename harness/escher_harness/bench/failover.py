"""How long scheduling stops when the extender's leader dies or pauses, with the shipped
defaults: `escher-extender bench failover`.

Two extender replicas elect a leader (lease 15 s, renew deadline 10 s, retry 2 s, as
deploy/ and kube-scheduler) behind the service proxy, which follows readiness every second
as deploy/'s readiness probe does; kube-scheduler runs with deploy/'s HTTP/2 health check
(escher_harness.localcluster.config.SCHEDULER_ENV). Under a steady load (a tiny pod every
0.2 s, each through the extender), the leader is sent SIGKILL or SIGSTOP, interleaved, and
the figure is the time from the signal to the first bind of a pod created after it. The
killed replica is started again (and given a lease duration to watch the lease, as a
standby of long standing has), the paused one resumed, and the next round waits until pods
bind steadily. The target (issue 31) is the lease duration + 3 s.

Also used by tests/e2e/test_failover.py (Load, leader, pid), which runs the same events with
short leases and asserts their bounds.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import statistics
import threading
import time
from pathlib import Path

import httpx
from kubernetes import client

from escher_harness import localcluster
from escher_harness.kubeclient import api_client
from escher_harness.localcluster.config import LeaseTimes
from escher_harness.workload import PodChange, Workload, pod_manifest

SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGSTOP": signal.SIGSTOP}
_names = itertools.count()


class Load:
    """A pod every `period` seconds (tiny, so they never fill a node), and a watch that
    records when each pod was first seen bound, by wall clock."""

    def __init__(self, work: Workload, period: float = 0.2, label: str = "failover") -> None:
        self.work, self.period, self.label = work, period, label
        self.created: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.bound_on: dict[str, str] = {}
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._create, daemon=True),
            threading.Thread(target=work.watch, args=(self.stop, self._seen), daemon=True),
        ]

    def _seen(self, change: PodChange) -> None:
        if not change.deleted:
            self.bound.setdefault(change.name, change.t)
            self.bound_on.setdefault(change.name, change.node or "")

    def _create(self) -> None:
        while not self.stop.is_set():
            name = f"tick-{next(_names)}"
            self.created[name] = time.time()
            try:
                self.work.create(
                    pod_manifest(name, requests={"cpu": "1m"}, labels={"load": self.label})
                )
            except Exception:  # the API server is away (or slow): nothing was created
                self.created.pop(name)
            self.stop.wait(self.period)

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)

    def first_bind_after(self, t: float) -> float | None:
        """When the first pod created after `t` was bound (wall clock)."""
        times = [self.bound[n] for n, c in self.created.items() if c > t and n in self.bound]
        return min(times) if times else None


def leader(info: localcluster.ClusterInfo, timeout: float = 30) -> str:
    """The replica whose /readyz answers 200 (only the leader's does)."""
    deadline = time.monotonic() + timeout
    while True:
        for name, url in localcluster.load(info.dir).replica_urls.items():
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/readyz", timeout=0.5).status_code == 200:
                    return name
        if time.monotonic() > deadline:
            raise TimeoutError(f"no replica led within {timeout:g}s")
        time.sleep(0.05)


def pid(info: localcluster.ClusterInfo, name: str) -> int:
    return localcluster.load(info.dir).pids[name]


def _wait_for_steady_binds(load: Load, seconds: float = 3.0, timeout: float = 120.0) -> None:
    """Until pods created in the last `seconds` have all been bound."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        since = time.time() - seconds
        recent = [n for n, c in load.created.items() if since < c < time.time() - 1]
        if len(recent) >= 5 and all(n in load.bound for n in recent):
            return
        time.sleep(0.5)
    raise TimeoutError("pods did not bind steadily again")


def _one(info: localcluster.ClusterInfo, load: Load, name: str, lease: LeaseTimes) -> float:
    """Signal the leader, return the seconds to the first bind of a pod created after it,
    and leave both replicas running again."""
    old = leader(info)
    at = time.time()
    os.kill(pid(info, old), SIGNALS[name])
    try:
        deadline = time.monotonic() + 4 * lease.duration + 60
        while (bound := load.first_bind_after(at)) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: no pod bound after the signal")
            time.sleep(0.05)
    finally:
        if name == "SIGSTOP":
            os.kill(pid(info, old), signal.SIGCONT)
    if name == "SIGKILL":
        localcluster.start_component(info.dir, old)
        # A replica that just started has not seen the lease renewed, so it would wait a
        # whole lease from its first look: a standby of long standing has seen it.
        time.sleep(lease.duration)
    return bound - at


def run(out: Path, repeat: int = 3, nodes: int = 4) -> str:
    lease = LeaseTimes()  # the shipped defaults
    out.mkdir(parents=True, exist_ok=True)
    spec = localcluster.ClusterSpec(
        dir=out / "cluster",
        nodes=nodes,
        # The load's pods stay (deleting them would load the API server during the
        # failover): five a second fill 110 pods a node within a few rounds.
        node_pods="100000",
        mode="extender",
        scope="every-pod",  # the load's pods all go through the extender, as measured before
        replicas=2,
        lease=lease,
        proxy_poll=1.0,
    )
    times: dict[str, list[float]] = {n: [] for n in SIGNALS}
    info = localcluster.up(spec)
    try:
        work = Workload(api_client(info.kubeconfig))
        with Load(work) as load:
            for rep in range(repeat):
                for name in SIGNALS if rep % 2 == 0 else reversed(list(SIGNALS)):
                    _wait_for_steady_binds(load)
                    took = _one(info, load, name, lease)
                    times[name].append(took)
                    print(f"failover: {name} {rep + 1}/{repeat}: first bind {took:.1f}s after")
        with contextlib.suppress(client.exceptions.ApiException):
            work.core.delete_collection_namespaced_pod(
                "default", label_selector="load=failover", grace_period_seconds=0
            )
    finally:
        for p in info.processes:  # never leave one paused for the teardown
            if p.name.startswith("extender"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGCONT)
        localcluster.down(info.dir, keep_logs=True)
    report = _report(times, lease)
    (out / "failover.md").write_text(report)
    _plot(out / "failover.png", times, lease)
    return report


def _report(times: dict[str, list[float]], lease: LeaseTimes) -> str:
    target = lease.duration + 3
    lines = [
        f"# Failover with the shipped defaults (lease {lease.duration:g} s, renew deadline "
        f"{lease.renew_deadline:g} s, retry {lease.retry_period:g} s)",
        "",
        "Seconds from the signal to the leader to the first bind of a pod created after it.",
        "",
        "| signal | median | min | max | each | target (lease + 3 s) |",
        "|---|---|---|---|---|---|",
    ]
    for name, ts in times.items():
        lines.append(
            f"| {name} | {statistics.median(ts):.1f} | {min(ts):.1f} | {max(ts):.1f} | "
            f"{', '.join(f'{t:.1f}' for t in ts)} | {'met' if max(ts) <= target else 'missed'}"
            f" ({target:g}) |"
        )
    return "\n".join(lines) + "\n"


def _plot(path: Path, times: dict[str, list[float]], lease: LeaseTimes) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for i, ts in enumerate(times.values()):
        ax.scatter(ts, [i] * len(ts), color=f"C{i}", zorder=3)
        ax.plot([statistics.median(ts)] * 2, [i - 0.25, i + 0.25], color=f"C{i}", lw=3)
    ax.axvline(lease.duration, color="grey", ls=":", label="lease duration")
    ax.axvline(lease.duration + 3, color="red", ls="--", label="target: lease + 3 s")
    ax.set_yticks(range(len(times)), list(times))
    ax.set_xlabel("seconds from the signal to the first bind (dots: runs, bar: median)")
    ax.set_xlim(left=0)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
