"""The gang benchmark's event trace and the figures computed from it. Pure, no I/O.

A trace is a time-ordered list of events: what the load generator did (a gang submitted,
rolled back, timed out, deleted) and what the cluster did (a member first seen bound, a
bound member deleted), each stamped with wall-clock seconds. Every figure in the report is
computed here from the trace alone, so it can be checked against a recorded trace
(tests/unit/test_trace.py). Called by escher_harness.bench.gang_bench.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from escher_harness.bench.stats import summary


class Kind(StrEnum):
    SUBMIT = "submit"  # the gang was handed to the approach (first attempt only counts)
    BOUND = "bound"  # a member pod was first seen with spec.nodeName
    UNBOUND = "unbound"  # a bound member pod was deleted
    ROLLBACK = "rollback"  # the approach undid a partly placed attempt and will retry
    TIMEOUT = "timeout"  # the gang did not complete within its deadline and was given up
    DONE = "done"  # the gang ran to completion and was deleted by the load generator


@dataclass(frozen=True)
class Event:
    t: float
    kind: Kind
    gang: str
    pod: str = ""
    size: int = 0  # the gang's minimum members (SUBMIT events)


def load(path: Path) -> list[Event]:
    events = []
    for line in path.read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            events.append(
                Event(d["t"], Kind(d["kind"]), d["gang"], d.get("pod", ""), d.get("size", 0))
            )
    return sorted(events, key=lambda e: e.t)


def dump(events: Iterable[Event]) -> str:
    return "".join(json.dumps(asdict(e)) + "\n" for e in events)


@dataclass(frozen=True)
class Figures:
    gangs_submitted: int
    gangs_completed: int
    latency_ms: dict[str, float]  # p50/p90/p99/max/n of submit -> last member bound
    latencies_ms: list[float]
    max_partial_gangs: int
    partial_pod_seconds: float
    rollbacks: int
    timeouts: int
    partial_series: list[tuple[float, int]]  # (seconds since start, partial gangs) steps

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("latencies_ms")
        d.pop("partial_series")
        return d


def figures(events: Sequence[Event]) -> Figures:
    """Every figure of one run.

    A gang is complete once `size` distinct members are bound at the same time; its latency
    runs from its first SUBMIT to that moment. It is *partially bound* while 0 < bound <
    size, and `partial_pod_seconds` integrates its bound members over those stretches: the
    resources an incomplete gang holds and cannot use.
    """
    events = sorted(events, key=lambda e: e.t)
    start = events[0].t if events else 0.0
    size: dict[str, int] = {}
    submitted: dict[str, float] = {}
    bound: dict[str, set[str]] = {}
    completed: dict[str, float] = {}
    partial: set[str] = set()
    series: list[tuple[float, int]] = [(0.0, 0)]
    pod_seconds = 0.0
    last_t = start
    rollbacks = timeouts = 0
    for e in events:
        # integrate the partial gangs' bound members up to this event
        pod_seconds += (e.t - last_t) * sum(len(bound[g]) for g in partial)
        last_t = e.t
        g = e.gang
        if e.kind is Kind.SUBMIT:
            size.setdefault(g, e.size)
            submitted.setdefault(g, e.t)
        elif e.kind is Kind.BOUND:
            bound.setdefault(g, set()).add(e.pod)
        elif e.kind is Kind.UNBOUND:
            bound.setdefault(g, set()).discard(e.pod)
        elif e.kind is Kind.ROLLBACK:
            rollbacks += 1
        elif e.kind is Kind.TIMEOUT:
            timeouts += 1
        n, want = len(bound.get(g, ())), size.get(g, 0)
        if want and n >= want and g not in completed:
            completed[g] = e.t
        was = g in partial
        # A completed gang being torn down is not "partially bound"; a given-up one is,
        # for as long as its members still hold their places.
        now = bool(want) and g not in completed and 0 < n < want
        if now != was:
            (partial.add if now else partial.discard)(g)
            series.append((e.t - start, len(partial)))
    latencies = [(completed[g] - submitted[g]) * 1000 for g in completed if g in submitted]
    return Figures(
        gangs_submitted=len(submitted),
        gangs_completed=len(completed),
        latency_ms=summary(latencies) if latencies else {},
        latencies_ms=sorted(latencies),
        max_partial_gangs=max(c for _, c in series),
        partial_pod_seconds=round(pod_seconds, 3),
        rollbacks=rollbacks,
        timeouts=timeouts,
        partial_series=series,
    )
