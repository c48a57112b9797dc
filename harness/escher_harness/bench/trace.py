"""The gang benchmark's event log and the figures computed from it. Pure, no I/O.

One run's log is a time-ordered list of events: what the load generator did (the replay
started, a gang submitted, rolled back, given up, done) and what the cluster did (a member
first seen bound, Running, Succeeded; a bound member deleted; a placeholder of a gang bound
or gone), each stamped with wall-clock seconds. Every figure of the report is computed here
from the log alone, so it can be checked against a recorded log (tests/unit/test_trace.py).
Called by escher_harness.bench.gang_bench; written by the locustfile's recorder.

Definitions (the report repeats them):
- A gang is *complete* once `size` distinct members are bound at once; its *latency* runs
  from its SUBMIT (the load generator's first call for it) to that moment. Its *creation*
  runs from SUBMIT to its first CREATED (its last member created by the load generator, one
  call at a time; for the pure approaches after their policy calls): the part of the latency
  spent before every member exists, mostly the API server admitting the members. It ends
  at completion if the load generator heard back from its last create call only after that.
- It *succeeded* once every member of the complete set has been seen Succeeded.
- It is *partial* while 0 < members bound < size, before it is complete. Placeholders are
  not members: a gang holding only placeholders is not partial.
- *Partial pod-seconds* integrate, over time, the pods bound for gangs not yet complete:
  members of partial gangs and placeholders alike (both hold room nothing can use yet). The
  placeholders' share is also given alone. After completion nothing of a gang counts.
- A *partial stretch* is one interval a gang is partial; it ends *completing* when the gang
  completes, otherwise (members deleted by a rollback or at the deadline) it was wasted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from escher_harness.bench.stats import summary


class Kind(StrEnum):
    START = "start"  # the replay's clock started (set-up and warm-up are over)
    SUBMIT = "submit"  # the load generator's first call for the gang (`due`: when planned)
    CREATED = "created"  # the load generator created the last member of an attempt
    BOUND = "bound"  # a member pod was first seen with spec.nodeName
    RUNNING = "running"  # a member pod was first seen Running
    SUCCEEDED = "succeeded"  # a member pod was first seen Succeeded (its room is free)
    UNBOUND = "unbound"  # a bound member pod was deleted
    HELD = "held"  # a placeholder pod of the gang was first seen bound
    RELEASED = "released"  # a bound placeholder pod of the gang was deleted
    ROLLBACK = "rollback"  # the approach undid a partly placed attempt and will retry
    TIMEOUT = "timeout"  # the gang did not complete within its deadline and was given up
    DONE = "done"  # the gang ran to completion (all Succeeded) and was deleted


@dataclass(frozen=True)
class Event:
    t: float
    kind: Kind
    gang: str = ""
    pod: str = ""
    size: int = 0  # SUBMIT: the gang's members (all required)
    due: float = 0.0  # SUBMIT: when the trace planned it (wall clock)
    node: str = ""  # BOUND: the node (placement quality, escher_harness.bench.topology)


def load(path: Path) -> list[Event]:
    events = []
    for line in path.read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            events.append(
                Event(
                    d["t"],
                    Kind(d["kind"]),
                    d.get("gang", ""),
                    d.get("pod", ""),
                    d.get("size", 0),
                    d.get("due", 0.0),
                    d.get("node", ""),
                )
            )
    return sorted(events, key=lambda e: e.t)


def line(e: Event) -> str:
    return json.dumps({k: v for k, v in asdict(e).items() if v or k in ("t", "kind")}) + "\n"


def dump(events: Iterable[Event]) -> str:
    return "".join(line(e) for e in events)


@dataclass(frozen=True)
class Figures:
    gangs_submitted: int
    gangs_completed: int
    gangs_succeeded: int
    latency_ms: dict[str, float]  # n/p50/p90/p99/max of submit -> last member bound
    latencies_ms: list[float]
    creation_ms: dict[str, float]  # n/p50/p90/p99/max of submit -> first CREATED
    max_partial_gangs: int
    partial_pod_seconds: float  # members and placeholders of incomplete gangs
    placeholder_pod_seconds: float  # the placeholders' share
    partial_stretches: int
    wasted_partial_stretches: int  # partial stretches that ended without the gang completing
    longest_partial_ms: float  # longest partial stretch (0 if none)
    rollbacks: int
    timeouts: int
    replay_lag_ms: float  # latest SUBMIT after its planned time: how faithful the replay was
    last_done_s: float  # seconds from START to the last gang done (0 if none)
    partial_series: list[tuple[float, int]]  # (seconds since START, partial gangs) steps

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("latencies_ms")
        d.pop("partial_series")
        return d


def figures(events: Sequence[Event]) -> Figures:
    """Every figure of one run (see the module's definitions)."""
    events = sorted(events, key=lambda e: e.t)
    starts = [e.t for e in events if e.kind is Kind.START]
    start = starts[0] if starts else events[0].t if events else 0.0
    run = _Run(start, last_t=start)
    for e in events:
        run.read(e)
    for since in run.partial_since.values():  # still partial when the log ends
        run.stretches.append((run.last_t - since, False))
    return run.figures()


@dataclass
class _Run:
    """A run's gangs as its log is read, event by event, from `start`."""

    start: float
    last_t: float
    size: dict[str, int] = field(default_factory=dict)
    submitted: dict[str, float] = field(default_factory=dict)
    created: dict[str, float] = field(default_factory=dict)
    bound: dict[str, set[str]] = field(default_factory=dict)
    held: dict[str, set[str]] = field(default_factory=dict)
    complete_set: dict[str, frozenset[str]] = field(default_factory=dict)
    succeeded: dict[str, set[str]] = field(default_factory=dict)
    completed: dict[str, float] = field(default_factory=dict)
    partial_since: dict[str, float] = field(default_factory=dict)
    stretches: list[tuple[float, bool]] = field(default_factory=list)  # (s, ended completing)
    series: list[tuple[float, int]] = field(default_factory=lambda: [(0.0, 0)])
    pod_seconds: float = 0.0
    placeholder_seconds: float = 0.0
    rollbacks: int = 0
    timeouts: int = 0
    lag: float = 0.0
    done_at: float = 0.0

    def read(self, e: Event) -> None:
        self._hold_until(e.t)
        self._note(e)
        self._track_partial(e)

    def _hold_until(self, t: float) -> None:
        """Integrate the room held for incomplete gangs up to `t`."""
        dt = max(0.0, t - self.last_t)
        waiting = [g for g in self.size if g not in self.completed]
        members = sum(len(self.bound.get(g, ())) for g in waiting if g in self.partial_since)
        placeholders = sum(len(self.held.get(g, ())) for g in waiting)
        self.pod_seconds += dt * (members + placeholders)
        self.placeholder_seconds += dt * placeholders
        self.last_t = max(self.last_t, t)

    def _note(self, e: Event) -> None:
        g = e.gang
        if e.kind is Kind.SUBMIT:
            self.size.setdefault(g, e.size)
            self.submitted.setdefault(g, e.t)
            if e.due:
                self.lag = max(self.lag, e.t - e.due)
        elif e.kind is Kind.CREATED:
            self.created.setdefault(g, e.t)
        elif e.kind is Kind.BOUND:
            self.bound.setdefault(g, set()).add(e.pod)
        elif e.kind is Kind.UNBOUND:
            self.bound.setdefault(g, set()).discard(e.pod)
        elif e.kind is Kind.HELD:
            self.held.setdefault(g, set()).add(e.pod)
        elif e.kind is Kind.RELEASED:
            self.held.setdefault(g, set()).discard(e.pod)
        elif e.kind is Kind.SUCCEEDED:
            self.succeeded.setdefault(g, set()).add(e.pod)
        elif e.kind is Kind.ROLLBACK:
            self.rollbacks += 1
        elif e.kind is Kind.TIMEOUT:
            self.timeouts += 1
        elif e.kind is Kind.DONE:
            self.done_at = max(self.done_at, e.t - self.start)

    def _track_partial(self, e: Event) -> None:
        """Whether `e`'s gang became complete, or began or ended a partial stretch."""
        g = e.gang
        n, want = len(self.bound.get(g, ())), self.size.get(g, 0)
        if want and n >= want and g not in self.completed:
            self.completed[g] = e.t
            self.complete_set[g] = frozenset(self.bound[g])
        now = bool(want) and g not in self.completed and 0 < n < want
        if now and g not in self.partial_since:
            self.partial_since[g] = e.t
            self.series.append((e.t - self.start, len(self.partial_since)))
        elif not now and g in self.partial_since:
            self.stretches.append((e.t - self.partial_since.pop(g), g in self.completed))
            self.series.append((e.t - self.start, len(self.partial_since)))

    def figures(self) -> Figures:
        completed, submitted, created = self.completed, self.submitted, self.created
        latencies = [(completed[g] - submitted[g]) * 1000 for g in completed if g in submitted]
        # CREATED is stamped when the last create call returns, and the watch may see a
        # member bound first: no member is bound before it exists, so creation ends by
        # completion.
        creations = [
            (min(created[g], completed.get(g, created[g])) - submitted[g]) * 1000
            for g in created
            if g in submitted
        ]
        stretches = self.stretches
        return Figures(
            gangs_submitted=len(submitted),
            gangs_completed=len(completed),
            gangs_succeeded=sum(
                1
                for g, members in self.complete_set.items()
                if members <= self.succeeded.get(g, set())
            ),
            latency_ms=summary(latencies) if latencies else {},
            latencies_ms=sorted(latencies),
            creation_ms=summary(creations) if creations else {},
            max_partial_gangs=max(c for _, c in self.series),
            partial_pod_seconds=round(self.pod_seconds, 3),
            placeholder_pod_seconds=round(self.placeholder_seconds, 3),
            partial_stretches=len(stretches),
            wasted_partial_stretches=sum(1 for _, completing in stretches if not completing),
            longest_partial_ms=round(max((s for s, _ in stretches), default=0.0) * 1000, 1),
            rollbacks=self.rollbacks,
            timeouts=self.timeouts,
            replay_lag_ms=round(self.lag * 1000, 1),
            last_done_s=round(self.done_at, 3),
            partial_series=self.series,
        )
