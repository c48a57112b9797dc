"""E3, the paper's Fig. 5c: hierarchical max-min fair sharing. Users A and B (weights 2:3)
in sub-org 1, user C in sub-org 2 (the sub-orgs weighted 1:1); A arrives at 0, B at one
phase, C at two phases (the paper's 0, 60 and 120 s). What the weights mean, max-min fair
over demand: a sub-org with demand gets its weight's part of the slots, and inside it each
user its weight's part of the sub-org's; so A alone has 100%, A and B 40% / 60%, and once C
arrives C 50%, A 20%, B 30% (`EXPECTED`).

The application side is ESCHER's: the fair-sharing ESL (extender.esl.fairshare) on the
policy API (ExtenderBackend), one resource per user, resized by the ESL's step; every second
the application reports each user's backlog (its pods not yet bound), steps the ESL, and
tops each arrived user up to `_BACKLOG` pending tasks, each requesting one unit of its
user's resource and running `task_s` (kwok's run time: a model of a task). The shares are
measured: every half second, each user's tasks bound and not finished, over the slots. A
phase's share is the mean over its steady part (after `settle` seconds, the time for tasks
to finish and the ESL to resize: no task is preempted). Runs in modes pure and extender.
Called by escher_harness.bench.paper.runner.
"""

from __future__ import annotations

import itertools
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kubernetes import client

from escher_harness import localcluster
from escher_harness.bench import approaches
from escher_harness.bench.paper.context import LABEL, say
from escher_harness.kubeclient import api_client
from escher_harness.listwatch import list_then_watch
from escher_harness.workload import Workload, pod_manifest
from extender.esl.backends import ExtenderBackend
from extender.esl.client import PolicyClient
from extender.esl.fairshare import FairShare, FairShareParams

FIGURE: Final = "Fig. 5c: hierarchical max-min fair sharing"
MODES: Final = ("pure", "extender")
USERS: Final = ("a", "b", "c")  # the ESL's keys are lower case: the paper's A, B, C
GROUPS: Final = {"org1": {"users": {"a": 2, "b": 3}}, "org2": {"users": {"c": 1}}}
# Each phase's share of the slots per user, as the weights define it (above).
EXPECTED: Final = (
    {"a": 1.0, "b": 0.0, "c": 0.0},
    {"a": 0.4, "b": 0.6, "c": 0.0},
    {"a": 0.2, "b": 0.3, "c": 0.5},
)
# The paper's plot (its caption says 2:3; the plot shows 62:38, then 58:42 inside sub-org 1).
PAPER: Final = (
    {"a": 1.0, "b": 0.0, "c": 0.0},
    {"a": 0.62, "b": 0.38, "c": 0.0},
    {"a": 0.29, "b": 0.21, "c": 0.5},
)
_BACKLOG: Final = 10
_RUN: Final = "e3"
_USER_LABEL: Final = "bench.escher.io/user"


@dataclass(frozen=True)
class Setup:
    phase_s: float = 60.0  # the paper's arrivals 60 s apart
    settle_s: float = 15.0
    task_s: float = 4.0
    slots: int = 20
    nodes: int = 10


FULL: Final = Setup()
QUICK: Final = Setup(phase_s=20.0, settle_s=8.0)


def run(mode: str, setup: Setup, rep: int) -> dict[str, Any]:
    """One mode on a fresh cluster: the three phases, the samples and each phase's shares."""
    footing = approaches.Footing(nodes=setup.nodes, node_cpu="4", node_memory="16Gi")
    with tempfile.TemporaryDirectory(prefix=f"escher-paper-e3-{mode}-") as tmp:
        info = localcluster.up(approaches.cluster_spec(mode, Path(tmp) / "c", footing))
        try:
            assert info.extender_url is not None, f"mode {mode} serves no policy API"
            with PolicyClient(info.extender_url, info.token, timeout=120) as policy:
                samples = _drive(info, policy, setup, rep)
        finally:
            localcluster.down(info.dir)
    out = {"samples": samples, "shares": shares(samples, setup)}
    say(f"rep {rep} E3 {mode}: shares per phase {out['shares']}")
    return out


def _drive(
    info: localcluster.ClusterInfo, policy: PolicyClient, setup: Setup, rep: int
) -> list[dict[str, float]]:
    params = FairShareParams.model_validate(
        {"name": f"e3r{rep}", "slots": setup.slots, "groups": GROUPS}
    )
    esl = FairShare(ExtenderBackend(policy), params)
    esl.apply()
    api = api_client(info.kubeconfig)
    work = Workload(api)
    pods = _Pods(work)
    names = itertools.count()
    samples: list[dict[str, float]] = []
    t0 = time.monotonic()
    next_step = t0
    try:
        while (now := time.monotonic()) < t0 + 3 * setup.phase_s:
            arrived = USERS[: int((now - t0) // setup.phase_s) + 1]
            if now >= next_step:
                pending = pods.pending()
                esl.report({u: pending.get(u, 0) if u in arrived else 0 for u in USERS})
                esl.step()
                for u in arrived:
                    req = esl.requests_for(u)
                    for _ in range(_BACKLOG - pending.get(u, 0)):
                        work.create(_pod(info, f"e3-{rep}-{u}-{next(names)}", u, req.limits, setup))
                next_step += 1.0
            samples.append({"t": round(now - t0, 2), **pods.running()})
            time.sleep(0.5)
        return samples
    finally:
        pods.close()
        Workload(api).delete_labelled(f"{LABEL}={_RUN}", timeout=600)
        esl.teardown()


def _pod(
    info: localcluster.ClusterInfo, name: str, user: str, limits: Mapping[str, str], setup: Setup
) -> dict[str, Any]:
    return pod_manifest(
        name,
        limits={**limits, "cpu": "100m", "memory": "64Mi"},
        labels={LABEL: _RUN, _USER_LABEL: user},
        scheduler_name=info.scheduler_name,
        run_time=setup.task_s,
    )


class _Pods:
    """The experiment's pods by user, from a watch in a thread: pending (not bound) and
    running (bound, not finished)."""

    def __init__(self, work: Workload) -> None:
        self.state: dict[
            str, tuple[str, str]
        ] = {}  # name -> (user, "pending" | "running" | "done")
        self.stop = False
        self.lock = threading.Lock()
        self.thread = threading.Thread(
            target=list_then_watch,
            args=(work.core.list_namespaced_pod, work.namespace),
            kwargs={
                "seen": self._seen,
                "done": lambda: self.stop,
                "deadline": time.monotonic() + 3600,
            },
            daemon=True,
        )
        self.thread.start()

    def _seen(self, pod: client.V1Pod, deleted: bool) -> None:
        labels = (pod.metadata.labels if pod.metadata else None) or {}
        user = labels.get(_USER_LABEL)
        if user is None or pod.metadata is None or pod.spec is None:
            return
        phase = pod.status.phase if pod.status is not None else None
        state = (
            "done"
            if deleted or phase in ("Succeeded", "Failed")
            else "running"
            if pod.spec.node_name
            else "pending"
        )
        with self.lock:
            self.state[str(pod.metadata.name)] = (user, state)

    def _count(self, which: str) -> dict[str, int]:
        with self.lock:
            out = dict.fromkeys(USERS, 0)
            for user, state in self.state.values():
                out[user] += state == which
            return out

    def pending(self) -> dict[str, int]:
        return self._count("pending")

    def running(self) -> dict[str, int]:
        return self._count("running")

    def close(self) -> None:
        self.stop = True
        self.thread.join(timeout=10)


def shares(samples: list[dict[str, float]], setup: Setup) -> list[dict[str, float | None]]:
    """Each phase's mean share of the slots per user, over its steady samples (after
    `settle_s` into the phase, up to the next arrival)."""
    out = []
    for k in range(3):
        lo, hi = k * setup.phase_s + setup.settle_s, (k + 1) * setup.phase_s
        window = [s for s in samples if lo <= s["t"] < hi]
        out.append(
            {
                u: round(sum(s[u] for s in window) / len(window) / setup.slots, 3)
                if window
                else None
                for u in USERS
            }
        )
    return out
