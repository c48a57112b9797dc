"""Replaying a workload trace against one approach: when each gang is submitted, and the
life it then runs. The same for every approach; only escher_harness.bench.approaches differs.

`replay` walks the trace in order and hands each gang to `spawn` at its planned time (open
loop: a slow approach never delays later arrivals, each gang lives in its own greenlet).
`life` is one gang's course: submit it (SUBMIT is logged just before the first API call),
and once all its members are bound start its job (the members get their run time), wait
until every member has Succeeded, delete it and log DONE; a gang not complete by its
deadline is logged TIMEOUT and deleted. Called by the locustfile (loadtests/
gang_locustfile.py), which supplies gevent's spawn and sleep; tested without a cluster.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from escher_harness.bench import approaches
from escher_harness.bench.approaches.base import Approach
from escher_harness.bench.scenario import GangArrival
from escher_harness.bench.trace import Event, Kind

# How long past its run time a started gang is waited for before it is deleted anyway.
SUCCEED_SLACK = 30.0


@dataclass(frozen=True)
class Outcome:
    gang: str
    completed: bool
    elapsed_ms: float  # submit -> complete (or given up)
    error: Exception | None = None  # the approach failed outright


class Waits(approaches.Pods, Protocol):
    def succeeded(self, names: Sequence[str], timeout: float) -> int: ...


def replay(
    trace: Sequence[GangArrival],
    t0: float,
    spawn: Callable[[GangArrival, float], object],
    sleep: Callable[[float], object],
    clock: Callable[[], float] = time.time,
) -> None:
    """Hand each arrival to `spawn(arrival, due)` at `due = t0 + arrival.at` (wall clock)."""
    for a in sorted(trace, key=lambda a: a.at):
        due = t0 + a.at
        wait = due - clock()
        if wait > 0:
            sleep(wait)
        spawn(a, due)


def life(
    approach: str | Approach,
    env: approaches.Env,
    waits: Waits,
    job: approaches.GangJob,
    due: float,
    emit: Callable[[Event], None],
    clock: Callable[[], float] = time.time,
) -> Outcome:
    a = job.arrival
    started = clock()
    emit(Event(started, Kind.SUBMIT, a.name, size=a.size, due=due))
    error: Exception | None = None
    try:
        # By name from the registry, or an Approach of a caller's own (bench paper's LibSpace).
        ok = (
            approaches.submit(approach, env, job)
            if isinstance(approach, str)
            else approach.submit(env, job)
        )
    except Exception as e:  # the approach failed outright: a failed gang, not a crash
        ok, error = False, e
    elapsed_ms = (clock() - started) * 1000
    if ok:
        members = approaches.start(env, job)
        waits.succeeded(members, a.run_time + SUCCEED_SLACK)
    else:
        emit(Event(clock(), Kind.TIMEOUT, a.name))
    if isinstance(approach, str):
        approaches.delete(approach, env, job)
    else:
        approach.delete(env, job)
    if ok:
        emit(Event(clock(), Kind.DONE, a.name))
    return Outcome(a.name, ok, elapsed_ms, error)
