"""E6, the paper's Fig. 7: gang scheduling latency of three designs (AppSpace, LibSpace,
FrameSpace: escher_harness.bench.paper.e6_designs) and two in-framework references, on 32
nodes of 8 cpu with gang requests from a trace.

The workload is the gang benchmark's `escher` preset, scenario `no-contention`
(escher_harness.bench.presets: sizes 2-16, powers of two with weights halving at each
doubling; members of 1, 2 or 4 cpu; run times log-normal, mean 4 s; a synthetic stand-in for
the paper's production trace), drawn once from the seed, so every design replays the same
gangs. Its rate is 2 gangs/s (about 8.5 member pods/s), not the paper's 111/s: that is what
2 shared cores drive. Each design runs on a fresh cluster: one uncounted warm-up gang, then
the trace replayed open-loop (each gang in a thread of its own at its planned time,
escher_harness.bench.replay). A gang's latency is from its submission to its last member
seen bound by a watch (replay.life's submit to complete), for the gangs completed; those
given up at the deadline are counted apart. Called by escher_harness.bench.paper.runner.
"""

from __future__ import annotations

import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from escher_harness import localcluster
from escher_harness.bench import presets, replay, scenario
from escher_harness.bench.approaches import Env, GangJob
from escher_harness.bench.paper.context import say
from escher_harness.bench.paper.e6_designs import DESIGNS
from escher_harness.bench.recorder import Recorder
from escher_harness.bench.stats import percentile
from escher_harness.bench.trace import Event, Kind
from escher_harness.kubeclient import api_client
from extender.core.names import CPU, MEMORY
from extender.core.quantity import amount
from extender.esl.client import PolicyClient

NAME: Final = "E6"
FIGURE: Final = "Fig. 7: gang scheduling latency of three designs"
# The paper's p50 / p90 in ms and its lines of policy (Ray, 32 nodes, ~111 gang requests/s).
PAPER_MS: Final = {
    "appspace": (915.0, 1081.0),
    "libspace": (892.0, 950.0),
    "framespace": (367.0, 408.0),
}
PAPER_LOC: Final = {"appspace": 78, "libspace": 261, "framespace": 1624}
PAPER_RATE: Final = 111.0
# What the extender's p50 must reach: a tenth of the paper's FrameSpace (issue 62's target).
TARGET_FRAMESPACE_MS: Final = 37.0
WORKLOAD: Final = presets.ESCHER
SCENARIO: Final = WORKLOAD.scenarios[0]  # no-contention
DURATION: Final = SCENARIO.duration
QUICK_DURATION: Final = 10.0
_JOIN_SLACK: Final = 60.0


def trace(duration: float, seed: int) -> tuple[scenario.GangArrival, ...]:
    return scenario.generate(replace(SCENARIO, duration=duration), seed)


def run(design: str, duration: float, seed: int, rep: int) -> dict[str, Any]:
    """One design on a fresh cluster of the preset's footing: the trace replayed, its
    figures. Every repetition replays the same trace (the seed's); `rep` only names."""
    arrivals = trace(duration, seed)
    approach = DESIGNS[design].approach
    with tempfile.TemporaryDirectory(prefix=f"escher-paper-e6-{design}-") as tmp:
        info = localcluster.up(approach.cluster_spec(Path(tmp) / "c", WORKLOAD.footing))
        try:
            return _replay(design, info, arrivals, rep)
        finally:
            localcluster.down(info.dir)


def _replay(
    design: str,
    info: localcluster.ClusterInfo,
    arrivals: tuple[scenario.GangArrival, ...],
    rep: int,
) -> dict[str, Any]:
    approach = DESIGNS[design].approach
    warm = scenario.GangArrival(0.0, "w00000", 2, arrivals[0].cpu, arrivals[0].memory, 0.0)
    marks = _Marks()
    api = api_client(info.kubeconfig, pool_size=128)
    footing = WORKLOAD.footing
    capacity = (
        amount(CPU, footing.node_cpu, field="cpu"),
        amount(MEMORY, footing.node_memory, field="memory"),
    )
    watch = Recorder(api, {a.name for a in (*arrivals, warm)}, marks.emit, capacity=capacity)
    stop = threading.Event()
    watcher = threading.Thread(target=watch.run, args=(stop,), daemon=True)
    watcher.start()
    policy = None
    if approach.uses_policy:
        assert info.extender_url is not None, f"{design} needs the policy API"
        policy = PolicyClient(info.extender_url, info.token, timeout=120)
    env = Env(info, api, watch, marks.on_event, policy)
    try:
        if not watch.synced.wait(60):
            raise RuntimeError("the pod watch did not list within 60 s")
        first = replay.life(approach, env, watch, _job(warm), time.time(), marks.emit)
        if not first.completed:
            raise RuntimeError(f"the warm-up gang did not complete: {first.error!r}")
        marks.rollbacks.clear()
        outcomes: list[replay.Outcome] = []
        lives: list[threading.Thread] = []

        def live(a: scenario.GangArrival, due: float) -> None:
            outcomes.append(replay.life(approach, env, watch, _job(a), due, marks.emit))

        def spawn(a: scenario.GangArrival, due: float) -> None:
            t = threading.Thread(target=live, args=(a, due), daemon=True)
            lives.append(t)
            t.start()

        say(f"rep {rep} E6 {design}: replaying {len(arrivals)} gangs")
        replay.replay(arrivals, time.time() + 0.2, spawn, time.sleep)
        end = time.monotonic() + SCENARIO.deadline + max(a.run_time for a in arrivals)
        for t in lives:
            t.join(max(0.0, end + _JOIN_SLACK - time.monotonic()))
        return figures(outcomes, marks, len(arrivals), len(watch.overcommits))
    finally:
        stop.set()
        watcher.join(timeout=10)
        if policy is not None:
            policy.close()


class _Marks:
    """What the runs say besides their outcome: when each gang was submitted and its last
    member created (each approach says "created" once an attempt's members exist), and the
    pure runners' rolled-back attempts."""

    def __init__(self) -> None:
        self.submitted: dict[str, float] = {}
        self.created: dict[str, float] = {}
        self.rollbacks: list[str] = []

    def emit(self, e: Event) -> None:
        if e.kind == Kind.SUBMIT:
            self.submitted[e.gang] = e.t

    def on_event(self, kind: str, gang: str) -> None:
        if kind == "created":
            self.created[gang] = time.time()
        elif kind == "rollback":
            self.rollbacks.append(gang)

    def creation_ms(self, gang: str) -> float | None:
        """Submission to the last member of its last attempt created."""
        if gang not in self.submitted or gang not in self.created:
            return None
        return (self.created[gang] - self.submitted[gang]) * 1000


def _job(a: scenario.GangArrival) -> GangJob:
    return GangJob(a, SCENARIO.deadline, SCENARIO.attempt_timeout)


def figures(
    outcomes: list[replay.Outcome], marks: _Marks, gangs: int, overcommits: int
) -> dict[str, Any]:
    """One run's figures: the completed gangs' latencies (for the CDF) and percentiles, and
    of their part after the last member was created (what the scheduling took once every
    pod existed); how many were given up or never ended, the pure runners' rollbacks, and
    the bindings that put a node over capacity."""
    completed = [o for o in outcomes if o.completed]
    done = sorted(round(o.elapsed_ms, 1) for o in completed)
    after = sorted(
        o.elapsed_ms - c for o in completed if (c := marks.creation_ms(o.gang)) is not None
    )
    return {
        "gangs": gangs,
        "completed": len(done),
        "given_up": sum(1 for o in outcomes if not o.completed),
        "unfinished": gangs - len(outcomes),
        "p50_ms": percentile(done, 50) if done else None,
        "p90_ms": percentile(done, 90) if done else None,
        "after_created_p50_ms": round(percentile(after, 50), 1) if after else None,
        "latencies_ms": done,
        "rollbacks": len(marks.rollbacks),
        "overcommits": overcommits,
    }
