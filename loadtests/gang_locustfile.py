"""Locust load for the gang benchmark: replay one workload trace against one approach.

One locust user does, in order: the set-up (API client, the pod watch listed and running,
the extender's policy client for the pure approaches), one warm-up gang that is not counted
(the same for every approach: it pays the cold start), the reading of kube-apiserver's write
counters; then the clock starts (START in the log) and every gang of the trace is submitted
at its planned time after it (open loop, each gang's life in its own greenlet:
escher_harness.bench.replay). Once every life has ended (bounded by the deadline and the run
times), the write counters are read again and locust quits. Nothing of the set-up falls in
the measured window, and no time limit (`-t`) cuts the trace short.

Each gang is reported to locust as a request ("gang", named by the approach) with its
submit-to-complete time, or as a failure if it was given up. The log (escher_harness.bench.
trace) is what the figures are computed from; the run's own facts (t0, the warm-up, the
write counters) go to the JSON file `result`.

Run by `escher-extender bench gang` (escher_harness.bench.gang_bench), configured by the JSON in
ESCHER_GANG_BENCH: approach, cluster_dir, workload (the trace file), log, result, deadline,
attempt_timeout, warmup (a GangArrival), topology ("", "required" or "preferred") and levels
(each gang's level), capacity (a node's cpu and memory, for the pod watch's over-commit
check). The result file also gets the over-commits seen and the approach's notes.
"""

from __future__ import annotations

import json
import os
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import gevent
from locust import User, constant, events, task
from locust.exception import StopUser

from escher_harness import localcluster
from escher_harness.bench import approaches, replay, scenario
from escher_harness.bench.apimetrics import write_counts
from escher_harness.bench.recorder import Recorder
from escher_harness.bench.trace import Event, Kind, line
from escher_harness.kubeclient import api_client
from extender.esl.client import PolicyClient

CFG: dict[str, Any] = json.loads(os.environ.get("ESCHER_GANG_BENCH", "{}"))
# Lives still running this long after the last arrival's deadline and run time are stopped.
_DRAIN_SLACK = replay.SUCCEED_SLACK + 30.0


class Run:
    """One replay: the cluster, the log, the watch, and the approach's environment."""

    def __init__(self) -> None:
        self.approach: str = CFG["approach"]
        self.trace = scenario.from_json(json.loads(Path(CFG["workload"]).read_text()))
        self.info = localcluster.load(Path(CFG["cluster_dir"]))
        self.api = api_client(self.info.kubeconfig, pool_size=128)
        # Line-buffered: the benchmark reads the file for its progress lines.
        self.log = open(CFG["log"], "a", buffering=1)  # noqa: SIM115 - closed in close()
        self.gangs = {a.name for a in self.trace}
        capacity = CFG.get("capacity")
        self.watch = Recorder(
            self.api, self.gangs, self.emit, capacity=tuple(capacity) if capacity else None
        )
        self.stop = threading.Event()
        self.watcher = gevent.spawn(self.watch.run, self.stop)
        policy = None
        if approaches.get(self.approach).uses_policy:
            assert self.info.extender_url is not None
            policy = PolicyClient(self.info.extender_url, self.info.token)
        self.env = approaches.Env(self.info, self.api, self.watch, self.on_event, policy)
        self.result: dict[str, Any] = {}

    def emit(self, e: Event) -> None:
        if e.kind in (Kind.START,) or e.gang in self.gangs:
            self.log.write(line(e))

    def on_event(self, kind: str, gang: str) -> None:  # the pure runner's rollbacks
        self.emit(Event(time.time(), Kind(kind), gang))

    def job(self, a: scenario.GangArrival) -> approaches.GangJob:
        level = (CFG.get("levels") or {}).get(a.name)
        return approaches.GangJob(
            a, CFG["deadline"], CFG["attempt_timeout"], CFG.get("topology", ""), level
        )

    def warm_up(self) -> None:
        """One gang like the trace's, not counted: the first pod, bind, filter call, group
        and policy call of the run happen here, outside the clock."""
        if not self.watch.synced.wait(30):
            raise RuntimeError("the pod watch did not list within 30 s")
        a = scenario.GangArrival(**CFG["warmup"])
        outcome = replay.life(
            self.approach, self.env, self.watch, self.job(a), time.time(), self.emit
        )
        gone = self.watch.gone(self.watch.pods_of(a.name), 30)
        self.result["warmup"] = {
            "gang": a.name,
            "completed": outcome.completed,
            "latency_ms": round(outcome.elapsed_ms, 1),
            "error": repr(outcome.error) if outcome.error else None,
            "cleaned_up": gone,
        }
        if not outcome.completed:
            raise RuntimeError(f"the warm-up gang did not complete: {outcome.error!r}")

    def replay(self) -> None:
        self.result["writes_before"] = write_counts(self.api)
        t0 = time.time() + 0.2
        self.result["t0"] = t0
        self.emit(Event(t0, Kind.START))
        lives: list[gevent.Greenlet] = []

        def spawn(a: scenario.GangArrival, due: float) -> None:
            lives.append(gevent.spawn(self.live, a, due))

        replay.replay(self.trace, t0, spawn, gevent.sleep)
        longest = CFG["deadline"] + max((a.run_time for a in self.trace), default=0.0)
        gevent.joinall(lives, timeout=longest + _DRAIN_SLACK)
        self.result["unfinished_lives"] = sum(1 for g in lives if not g.dead)
        gevent.killall([g for g in lives if not g.dead], timeout=5)
        self.result["writes_after"] = write_counts(self.api)
        self.result["drained"] = time.time()

    def live(self, a: scenario.GangArrival, due: float) -> None:
        try:
            out = replay.life(self.approach, self.env, self.watch, self.job(a), due, self.emit)
        except Exception as e:  # deleting failed: count the gang as failed, keep replaying
            out = replay.Outcome(a.name, False, 0.0, e)
        events.request.fire(
            request_type="gang",
            name=self.approach,
            response_time=out.elapsed_ms,
            response_length=a.size if out.completed else 0,
            exception=None if out.completed else out.error or TimeoutError(f"{a.name} given up"),
            context={},
        )

    def close(self) -> None:
        self.stop.set()
        self.watcher.join(timeout=10)
        if self.env.policy is not None:
            self.env.policy.close()
        self.result["overcommits"] = self.watch.overcommits
        self.result["notes"] = self.env.notes
        self.log.close()
        Path(CFG["result"]).write_text(json.dumps(self.result, indent=1) + "\n")


class Replayer(User):
    wait_time = constant(0)

    @task
    def replay(self) -> None:
        run: Run | None = None
        try:
            run = Run()
            run.warm_up()
            run.replay()
        except Exception:
            Path(CFG["result"] + ".error").write_text(traceback.format_exc())
        finally:
            if run is not None:
                run.close()
            runner = self.environment.runner
            if runner is not None:
                gevent.spawn(runner.quit)
        raise StopUser()
