"""Locust load for the gang benchmark: gangs arrive at a fixed rate and run their course.

One locust user paces arrivals (`constant_pacing(1 / rate)`); each arrival runs a gang's
life in its own greenlet: submit it through the approach under test (escher_harness.bench.
approaches), wait until all members are bound or its deadline passes, hold it `hold` seconds
(the job "runs"), delete it. Arrivals are open-loop: a slow approach does not slow them down.
A watch in this process records when each member is first seen bound and when a bound member
is deleted; together with the life events that makes the trace (escher_harness.bench.trace) the
figures are computed from. Each gang is also reported to locust as a request ("gang", named
by the approach) with its submit-to-complete time, or as a failure if it was given up.

Run by `escher-extender bench gang` (escher_harness.bench.gang_bench), configured by the JSON in
ESCHER_GANG_BENCH: approach, cluster_dir, trace, size, cpu, memory, rate, hold, deadline,
attempt_timeout.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import gevent
from locust import User, constant_pacing, events, task

from escher_harness import localcluster
from escher_harness.bench import approaches
from escher_harness.bench.trace import Event, Kind
from escher_harness.kubeclient import api_client
from escher_harness.workload import PodChange, Workload

CFG: dict[str, Any] = json.loads(os.environ.get("ESCHER_GANG_BENCH", "{}"))
_ids = itertools.count(1)
_lives: list[gevent.Greenlet] = []


class Run:
    """The run's shared state: API client, trace file, bound members per gang."""

    def __init__(self) -> None:
        self.info = localcluster.load(Path(CFG["cluster_dir"]))
        self.api = api_client(self.info.kubeconfig, pool_size=64)
        # Line-buffered: the benchmark reads the file for its progress lines.
        self.trace = open(CFG["trace"], "a", buffering=1)  # noqa: SIM115 - closed at test_stop
        self.bound: dict[str, int] = {}
        self.stop = threading.Event()
        self.env = approaches.Env(self.info, self.api, self, self.event)
        self.watcher = gevent.spawn(Workload(self.api).watch, self.stop, self.on_change)

    def emit(self, e: Event) -> None:
        self.trace.write(
            json.dumps(
                {"t": e.t, "kind": e.kind.value, "gang": e.gang, "pod": e.pod, "size": e.size}
            )
            + "\n"
        )

    def event(self, kind: str, gang: str) -> None:  # the pure ESL's rollbacks
        self.emit(Event(time.time(), Kind(kind), gang))

    def on_change(self, c: PodChange) -> None:
        gang = c.name.split("-")[0]
        self.bound[gang] = self.bound.get(gang, 0) + (-1 if c.deleted else 1)
        self.emit(Event(c.t, Kind.UNBOUND if c.deleted else Kind.BOUND, gang, c.name))

    def wait(self, gang: str, size: int, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while self.bound.get(gang, 0) < size:
            if time.monotonic() > end:
                return False
            gevent.sleep(0.02)
        return True

    def close(self) -> None:
        self.stop.set()
        self.watcher.join(timeout=5)
        self.trace.close()


_run: Run | None = None


@events.test_start.add_listener
def _start(**_: Any) -> None:
    global _run
    _run = Run()


@events.test_stop.add_listener
def _stop(**_: Any) -> None:
    # Let every gang already submitted run its course (bounded by its deadline and hold).
    gevent.joinall(_lives, timeout=CFG["deadline"] + CFG["hold"] + 30)
    if _run is not None:
        _run.close()


def _life(run: Run) -> None:
    name = f"g{next(_ids):05d}"
    job = approaches.GangJob(
        name, CFG["size"], CFG["cpu"], CFG["memory"], CFG["deadline"], CFG["attempt_timeout"]
    )
    start = time.time()
    run.emit(Event(start, Kind.SUBMIT, name, size=job.size))
    exception: Exception | None = None
    try:
        ok = approaches.submit(CFG["approach"], run.env, job)
    except Exception as e:  # the approach failed outright: a failed request, not a crash
        ok, exception = False, e
    elapsed_ms = (time.time() - start) * 1000
    if ok:
        events.request.fire(
            request_type="gang",
            name=CFG["approach"],
            response_time=elapsed_ms,
            response_length=job.size,
            exception=None,
            context={},
        )
        gevent.sleep(CFG["hold"])
    else:
        run.emit(Event(time.time(), Kind.TIMEOUT, name))
        events.request.fire(
            request_type="gang",
            name=CFG["approach"],
            response_time=elapsed_ms,
            response_length=0,
            context={},
            exception=exception or TimeoutError(f"{name} given up"),
        )
    approaches.delete(CFG["approach"], run.env, job)
    if ok:
        run.emit(Event(time.time(), Kind.DONE, name))


class Submitter(User):
    wait_time = constant_pacing(1.0 / float(CFG.get("rate", 1.0)))

    @task
    def submit(self) -> None:
        assert _run is not None
        _lives.append(gevent.spawn(_life, _run))
