"""How long scheduling stops when the extender's leader dies or pauses, in deploy/'s layout:
`escher-extender bench failover`.

Two extender replicas elect a leader (lease 15 s, renew deadline 10 s, retry 2 s, as
deploy/ and kube-scheduler) behind the service proxy, which follows readiness every second
as deploy/'s readiness probe does; kube-scheduler runs with deploy/'s environment (its HTTP/2
health check, escher_harness.localcluster.config.SCHEDULER_ENV) and the layout's
KubeSchedulerConfiguration. The layouts (`--layout`):

- `split` (the default, deploy/overlays/extender): the marker policy sends each exchange only
  to the pods that need it, filter and prioritize go to the verbs' HTTP/1.1 listener, bind to
  the HTTP/2 one, over mutual TLS; the adaptive gang gate on;
- `every-pod` (`--scope every-pod`): every pod every exchange, every verb over HTTP/2;
- `sidecar` (deploy/overlays/sidecar's configuration): the split over plain HTTP/1.1, every
  verb on one listener. deploy/'s sidecar runs one pod, so there a failover is a new pod;
  here the same configuration runs behind the proxy with two replicas.

Under a steady load (a one-member gang every 0.2 s: every such pod goes through the
extender's filter and bind in every layout), the leader is sent SIGKILL or SIGSTOP,
interleaved, and right after the signal a burst of one-member gangs is created: those pods
see the whole outage (their first tries fail, and kube-scheduler backs them off). The
figures: the time from the signal to the first bind of a burst pod (the headline, against
the target lease + 3 s, issue 31 and 58), to the last one, and to the first bind of any pod
created after the signal. The killed replica is started again (and given a lease duration
to watch the lease, as a standby of long standing has), the paused one resumed, and the
next round waits until pods bind steadily.

Also used by tests/e2e/test_failover*.py (Load, leader, pid), which run the same events with
short leases and assert their bounds.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Self

import httpx
from kubernetes import client

from escher_harness import localcluster
from escher_harness.kubeclient import api_client
from escher_harness.localcluster.config import LeaseTimes
from escher_harness.workload import PodChange, Workload, pod_manifest

SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGSTOP": signal.SIGSTOP}
Layout = Literal["split", "every-pod", "sidecar"]
LAYOUTS: tuple[Layout, ...] = ("split", "every-pod", "sidecar")
BURST = 3  # one-member gangs created right after each signal
_names = itertools.count()


def one_member_gang(name: str, label: str) -> dict[str, Any]:
    """A tiny gang of one: in the split the marker policy sends it the extender's filter and
    bind, so it needs the leader like any gang member."""
    return pod_manifest(
        name,
        requests={"cpu": "1m"},
        labels={"load": label, "escher.io/gang": name},
        annotations={"escher.io/gang-min": "1"},
    )


class Background:
    """Worker threads that run while the object is entered: started on entry; on exit, told
    to stop (`stop`) and joined for at most `join_seconds` each."""

    threads: list[threading.Thread]
    stop: threading.Event
    join_seconds = 10.0

    def __enter__(self) -> Self:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=self.join_seconds)


class Load(Background):
    """A pod every `period` seconds (tiny, so they never fill a node; one-member gangs with
    `gangs`, so that the split sends them to the extender too), and a watch that records when
    each pod was first seen bound, by wall clock."""

    def __init__(
        self, work: Workload, period: float = 0.2, label: str = "failover", gangs: bool = False
    ) -> None:
        self.work, self.period, self.label, self.gangs = work, period, label, gangs
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

    def manifest(self, name: str) -> dict[str, Any]:
        if self.gangs:
            return one_member_gang(name, self.label)
        return pod_manifest(name, requests={"cpu": "1m"}, labels={"load": self.label})

    def create(self, name: str) -> bool:
        """Create one pod of the load now; False if the API server did not take it."""
        self.created[name] = time.time()
        try:
            self.work.create(self.manifest(name))
        except Exception:  # the API server is away (or slow): nothing was created
            self.created.pop(name)
            return False
        return True

    def _create(self) -> None:
        while not self.stop.is_set():
            self.create(f"tick-{next(_names)}")
            self.stop.wait(self.period)

    def first_bind_after(self, t: float) -> float | None:
        """When the first pod created after `t` was bound (wall clock)."""
        # A copy: the creating thread adds to it meanwhile.
        created = list(self.created.items())
        times = [self.bound[n] for n, c in created if c > t and n in self.bound]
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
        recent = [n for n, c in list(load.created.items()) if since < c < time.time() - 1]
        if len(recent) >= 5 and all(n in load.bound for n in recent):
            return
        time.sleep(0.5)
    raise TimeoutError("pods did not bind steadily again")


@dataclass(frozen=True)
class Round:
    """One failover, in seconds from the signal."""

    first: float  # the first bind of a pod created right after the signal
    last: float  # the last of those
    any: float  # the first bind of any pod created after the signal (the steady load's too)


def _one(info: localcluster.ClusterInfo, load: Load, name: str, lease: LeaseTimes) -> Round:
    """Signal the leader, create the burst, return when its pods were bound, and leave both
    replicas running again."""
    old = leader(info)
    at = time.time()
    os.kill(pid(info, old), SIGNALS[name])
    round_no = next(_names)
    burst = [f"burst-{round_no}-{i}" for i in range(BURST)]
    try:
        for pod in burst:
            while not load.create(pod):  # the API server is up: a refusal is a blip
                time.sleep(0.1)
        deadline = time.monotonic() + 4 * lease.duration + 60
        while not all(p in load.bound for p in burst):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: the burst's pods were not all bound")
            time.sleep(0.05)
    finally:
        if name == "SIGSTOP":
            os.kill(pid(info, old), signal.SIGCONT)
    if name == "SIGKILL":
        localcluster.start_component(info.dir, old)
        # A replica that just started has not seen the lease renewed, so it would wait a
        # whole lease from its first look: a standby of long standing has seen it.
        time.sleep(lease.duration)
    first_any = load.first_bind_after(at)
    assert first_any is not None  # the burst's pods are among them
    times = [load.bound[p] - at for p in burst]
    return Round(first=min(times), last=max(times), any=first_any - at)


def cluster_spec(
    out: Path, layout: Layout, lease: LeaseTimes, nodes: int
) -> localcluster.ClusterSpec:
    """The embedded cluster as deploy/ runs the layout, with two extender replicas."""
    return localcluster.ClusterSpec(
        dir=out / "cluster",
        nodes=nodes,
        # The load's pods stay (deleting them would load the API server during the
        # failover): five a second fill 110 pods a node within a few rounds.
        node_pods="100000",
        mode="extender",
        scope="every-pod" if layout == "every-pod" else "split",
        # deploy/'s sidecar: the verbs over plain HTTP/1.1 on one listener.
        verbs_tls=layout != "sidecar",
        # deploy/'s extender and sidecar overlays hold gang members at the gate while gangs
        # wait for room (never here: the gangs are tiny, but the policy is in the path).
        gang_gate=layout != "every-pod",
        replicas=2,
        lease=lease,
        proxy_poll=1.0,  # deploy/'s readiness probe: every second
    )


def run(out: Path, repeat: int = 3, nodes: int = 4, layout: Layout = "split") -> str:
    lease = LeaseTimes()  # the shipped defaults
    out.mkdir(parents=True, exist_ok=True)
    rounds: dict[str, list[Round]] = {n: [] for n in SIGNALS}
    info = localcluster.up(cluster_spec(out, layout, lease, nodes))
    try:
        work = Workload(api_client(info.kubeconfig))
        with Load(work, gangs=True) as load:
            for rep in range(repeat):
                for name in SIGNALS if rep % 2 == 0 else reversed(list(SIGNALS)):
                    _wait_for_steady_binds(load)
                    r = _one(info, load, name, lease)
                    rounds[name].append(r)
                    print(
                        f"failover ({layout}): {name} {rep + 1}/{repeat}: the burst bound "
                        f"{r.first:.1f}-{r.last:.1f}s after, any pod {r.any:.1f}s",
                        flush=True,
                    )
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
    report = _report(rounds, lease, layout)
    (out / "failover.md").write_text(report)
    _plot(out / "failover.png", {n: [r.first for r in rs] for n, rs in rounds.items()}, lease)
    return report


def _spread(ts: list[float]) -> str:
    return f"{statistics.median(ts):.1f} [{min(ts):.1f}-{max(ts):.1f}]"


def _report(rounds: dict[str, list[Round]], lease: LeaseTimes, layout: Layout) -> str:
    target = lease.duration + 3
    lines = [
        f"# Failover, layout {layout}, the shipped lease ({lease.duration:g} s, renew "
        f"deadline {lease.renew_deadline:g} s, retry {lease.retry_period:g} s)",
        "",
        f"Seconds from the signal to the leader to the binds of {BURST} one-member gangs "
        "created right after it (first and last), and to the first bind of any pod created "
        "after it; median [min-max].",
        "",
        "| signal | rounds | first bind | last bind | any pod | first bind, each | "
        "target (lease + 3 s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, rs in rounds.items():
        first = [r.first for r in rs]
        met = sum(t <= target for t in first)
        lines.append(
            f"| {name} | {len(rs)} | {_spread(first)} | {_spread([r.last for r in rs])} | "
            f"{_spread([r.any for r in rs])} | {', '.join(f'{t:.1f}' for t in first)} | "
            f"met in {met} of {len(rs)} ({target:g}) |"
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
