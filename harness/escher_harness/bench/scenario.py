"""A gang workload as a trace generated once from a seed, then replayed by every approach.

A Scenario is the parameters (arrival rate and duration, gang sizes, member shapes, run
times, deadline); `generate(scenario, seed)` draws the trace: every gang's arrival time,
name, size, per-member cpu and memory, and run time. Arrivals are a Poisson process (an open
loop: exponential gaps at `rate`, whatever the cluster does). The same scenario and seed give
the same trace on any machine (Python's random.Random is specified to); `digest` is the hash
the report prints, so two reports can be checked to have replayed the same work.
Pure, no I/O. Called by escher_harness.bench.presets, gang_bench and the locustfile.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from escher_harness.bench.distributions import ints, parse, parse_shapes


@dataclass(frozen=True)
class Scenario:
    name: str
    rate: float  # gang arrivals per second (Poisson)
    duration: float  # arrivals fall in [0, duration) seconds after the start
    sizes: str  # members per gang, all required (a distribution of whole numbers)
    shapes: str  # per-member cpu/memory (a weighted choice of shapes)
    run_time: str  # seconds a complete gang runs before it succeeds (a distribution)
    deadline: float  # a gang not complete this long after its submission is given up
    attempt_timeout: float  # the pure approaches: one attempt's wait before a rollback
    # Each gang asks for its topology level (escher_harness.bench.topology): "" (no topology),
    # "required" or "preferred". Not part of the trace: the arrivals are the same.
    topology: str = ""

    def __post_init__(self) -> None:
        if self.topology not in ("", "required", "preferred"):
            raise ValueError(
                f"scenario {self.name}: topology must be required, preferred or empty, "
                f"not {self.topology!r}"
            )
        # Parsing checks the text; a bad scenario fails when it is made, not mid-run.
        ints(parse(self.sizes))
        parse_shapes(self.shapes)
        parse(self.run_time)
        for name in ("rate", "duration", "deadline", "attempt_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"scenario {self.name}: {name} must be > 0")

    def offered_cpu(self) -> float:
        """Mean cpu the arrivals ask for while running: rate x size x cpu x run time (cores)."""
        return (
            self.rate
            * parse(self.sizes).mean()
            * parse_shapes(self.shapes).mean_cpu()
            * parse(self.run_time).mean()
        )


@dataclass(frozen=True)
class GangArrival:
    at: float  # seconds after the replay's start
    name: str  # g<5 digits>, in arrival order; pods are <name>-<suffix>
    size: int
    cpu: str  # per member
    memory: str
    run_time: float  # seconds, from the moment the whole gang is bound


def generate(scenario: Scenario, seed: int) -> tuple[GangArrival, ...]:
    """The scenario's trace for `seed`. Times are rounded to the millisecond, so the trace
    survives a round trip through JSON exactly."""
    # One stream per quantity, seeded by the seed alone (not the scenario's name): changing
    # the run-time distribution leaves arrivals and sizes as they were, so two scenarios that
    # differ in one parameter differ only in it.
    streams = {k: random.Random(f"{seed}/{k}") for k in ("at", "size", "shape", "run")}
    sizes, shapes, run = (
        parse(scenario.sizes),
        parse_shapes(scenario.shapes),
        parse(scenario.run_time),
    )
    out: list[GangArrival] = []
    t = streams["at"].expovariate(scenario.rate)
    while t < scenario.duration:
        cpu, memory = shapes.sample(streams["shape"])
        out.append(
            GangArrival(
                at=round(t, 3),
                name=f"g{len(out) + 1:05d}",
                size=int(sizes.sample(streams["size"])),
                cpu=cpu,
                memory=memory,
                run_time=round(run.sample(streams["run"]), 3),
            )
        )
        t += streams["at"].expovariate(scenario.rate)
    return tuple(out)


def to_json(trace: Sequence[GangArrival]) -> list[dict[str, Any]]:
    return [asdict(a) for a in trace]


def from_json(data: Sequence[Mapping[str, Any]]) -> tuple[GangArrival, ...]:
    return tuple(GangArrival(**d) for d in data)


def digest(trace: Sequence[GangArrival]) -> str:
    """A short hash of the trace's content (sha256 of its canonical JSON, 16 hex digits)."""
    canonical = json.dumps(to_json(trace), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
