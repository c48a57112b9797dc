"""The gang benchmark's presets: a cluster shared by every approach, and its scenarios.

Each preset has two scenarios drawn from one seed: `no-contention` (the arrivals ask for
about a fifth to a quarter of the cluster's cpu on average, so a gang finds room at once)
and `contention` (they ask for well over the cluster's cpu while arrivals last, so gangs
queue, and approaches that hold partial gangs waste room). Sizes are offered load
(rate x mean size x mean cpu x mean run time) over capacity; `describe` prints it.

- quick: what `make demo` runs: 8 nodes, 15 s of arrivals per scenario (about 20-25 gangs),
  one repetition; about 14 minutes for every approach on 2 cores (measured with eight).
- standard: 16 nodes, 40 s of arrivals (about 60 gangs per scenario), 3 repetitions.
- escher: ESCHER's gang workload as its paper describes it: 32 nodes of 8 cpu, gang
  requests sampled from a cluster trace. We have no trace, so sizes and shapes come from a
  documented synthetic distribution (below); the rate is scaled to what this 2-core machine
  sustains, not the paper's.
- scale: 1,000 nodes, fewer and larger gangs (what a 2-core machine drives at that size).
- topology: 5,000 nodes labelled into zones, blocks and racks, gangs of 64 to 1,024, the
  same trace without topology, with each gang's level required, and preferred (below).

Called by the CLI (escher_harness.cli) and escher_harness.bench.gang_bench.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from escher_harness.bench.approaches import Footing
from escher_harness.bench.scenario import Scenario
from escher_harness.localcluster.config import Scope
from escher_harness.localcluster.cpus import Side
from escher_harness.localcluster.fakenodes import Topology


@dataclass(frozen=True)
class Preset:
    name: str
    footing: Footing
    scenarios: tuple[Scenario, ...]
    repeat: int
    seed: int = 1
    note: str = ""

    def capacity_cpu(self) -> float:
        return self.footing.nodes * float(self.footing.node_cpu)

    def describe(self) -> str:
        lines = []
        for s in self.scenarios:
            lines.append(
                f"{s.name}: offered load {s.offered_cpu():.0f} cpu of "
                f"{self.capacity_cpu():.0f} ({s.offered_cpu() / self.capacity_cpu():.0%})"
            )
        return "; ".join(lines)


def _pair(
    sizes: str,
    duration: float,
    deadline: float,
    calm: dict[str, Any],
    busy: dict[str, Any],
) -> tuple[Scenario, ...]:
    common: dict[str, Any] = {
        "sizes": sizes,
        "duration": duration,
        "deadline": deadline,
        "attempt_timeout": 5.0,
    }
    return (
        Scenario(name="no-contention", **common, **calm),
        Scenario(name="contention", **common, **busy),
    )


QUICK = Preset(
    "quick",
    Footing(nodes=8, node_cpu="8", node_memory="32Gi"),
    _pair(
        "2:2,4:2,8:1",
        duration=15.0,
        deadline=15.0,
        calm={"rate": 1.5, "shapes": "1/1Gi:3,2/2Gi:1", "run_time": "uniform:1,3"},
        busy={"rate": 1.5, "shapes": "1/1Gi:1,2/2Gi:1", "run_time": "uniform:8,16"},
    ),
    repeat=1,
    note="the demo: one repetition, so no spread; the other presets run three",
)

STANDARD = Preset(
    "standard",
    Footing(nodes=16, node_cpu="8", node_memory="32Gi"),
    _pair(
        "2:3,4:3,8:2,16:1",
        duration=40.0,
        deadline=30.0,
        calm={"rate": 1.5, "shapes": "1/1Gi:3,2/2Gi:1", "run_time": "uniform:1,4"},
        busy={"rate": 1.5, "shapes": "1/1Gi:1,2/2Gi:1,4/4Gi:1", "run_time": "uniform:8,16"},
    ),
    repeat=3,
)

# ESCHER's gang workload (SoCC 2022): 32 nodes of 8 cpu, gang requests sampled from a cluster
# trace. Without the trace: gang sizes are powers of two with weights halving at each
# doubling (most gangs small, a few large, as published traces of ML clusters show), members
# of 1, 2 or 4 cpu with 2 GiB per cpu, weights 4:2:1; run times log-normal. None of this is
# fitted to a trace. The rate is what 2 cores drive (about 10 member pods a second).
ESCHER = Preset(
    "escher",
    Footing(nodes=32, node_cpu="8", node_memory="32Gi"),
    _pair(
        "2:8,4:4,8:2,16:1",
        duration=30.0,
        deadline=30.0,
        calm={"rate": 2.0, "shapes": "1/2Gi:4,2/4Gi:2,4/8Gi:1", "run_time": "lognormal:4,0.6,20"},
        busy={
            "rate": 2.5,
            "shapes": "1/2Gi:4,2/4Gi:2,4/8Gi:1",
            "run_time": "lognormal:20,0.5,40",
        },
    ),
    repeat=3,
    note="synthetic gang requests shaped like a cluster trace (see presets.py); rate scaled "
    "to a 2-core machine",
)

# 1,000 nodes: members take a whole node's cpu in the contention scenario, so a few large,
# long gangs fill the cluster at a pod rate 2 cores can drive.
SCALE = Preset(
    "scale",
    Footing(nodes=1000, node_cpu="8", node_memory="32Gi"),
    _pair(
        "8:2,16:2,32:1,64:1",
        duration=60.0,
        deadline=60.0,
        calm={"rate": 0.5, "shapes": "1/1Gi:3,2/2Gi:1", "run_time": "uniform:5,15"},
        busy={"rate": 0.5, "shapes": "8/16Gi", "run_time": "uniform:60,120"},
    ),
    repeat=3,
)

# 5,000 nodes in a hierarchy: racks of 32 nodes, blocks of 16 racks (512 nodes), zones of 4
# blocks (5,000 nodes: 157 racks, the last of 8 nodes; 10 blocks, the last of 392; 3 zones).
# Nodes of 8 cpu / 32Gi and members of 4 cpu / 16Gi: two members a node, so a rack holds 64
# members and a block 1,024. Each gang's level (escher_harness.bench.topology) is the smallest
# that holds it: rack for the gangs of 64, block for 128 to 1,024 (a gang of 1,024 needs a
# whole empty block, one of 64 a whole empty rack). That is where the contention is: the
# trace's gangs never fill the cluster (2,496 members at most, of 10,000 places), but they
# overlap (run times of 30-60 s against 40 s of arrivals), and a gang that requires its level
# waits while no domain of it has room, which placements that spread over the cluster cause.
# Filling 5,000 nodes would take 10,000 member pods a run, several times what 2 cores schedule
# in a sensible time (kube-scheduler alone does about 46 pods/s at 5,000 nodes here, about 26
# with the extender in its path: docs/results/performance-2026-11.md).
# Sizes: heavy on 64-256 with some 512 and 1,024. Total pods decide a run's time, so the
# trace is short: seed 83 gives 10 gangs, 2,496 members, every size present (64 x3, 128 x4,
# 256, 512, 1,024; the gang of 1,024 arrives sixth, onto a cluster already in use). With
# about a minute to start a 5,000-node control plane, a run takes about 3 minutes, so 4
# approaches x 3 repetitions take about 35-45 minutes per scenario (an estimate from the
# throughput above, not a measurement at 5,000 nodes). Deadline 120 s: at 26 pods/s the gang
# of 1,024 alone needs 40 s to bind; the pure runner's attempt timeout is 60 s for the same
# reason. p50/p99 of 10 gangs per run are coarse (p99 is the slowest gang): 3 repetitions give
# 30 samples per figure; more gangs cost minutes per run.
TOPOLOGY = Preset(
    "topology",
    Footing(
        nodes=5000,
        node_cpu="8",
        node_memory="32Gi",
        topology=Topology(rack_nodes=32, racks_per_block=16, blocks_per_zone=4),
    ),
    tuple(
        Scenario(
            name=name,
            rate=0.3,
            duration=40.0,
            sizes="64:8,128:4,256:2,512:1,1024:1",
            shapes="4/16Gi",
            run_time="uniform:30,60",
            deadline=120.0,
            attempt_timeout=60.0,
            topology=mode,
        )
        for name, mode in (
            ("no-topology", ""),
            ("required", "required"),
            ("preferred", "preferred"),
        )
    ),
    repeat=3,
    seed=83,
    note="5,000 nodes in racks of 32, blocks of 16 racks and zones of 4 blocks; each gang "
    "requires (or prefers) the smallest level that holds it (see presets.py)",
)

PRESETS = {p.name: p for p in (QUICK, STANDARD, ESCHER, SCALE, TOPOLOGY)}


def customised(
    preset: Preset,
    *,
    scenarios: list[str] | None = None,
    nodes: int | None = None,
    repeat: int | None = None,
    seed: int | None = None,
    qps: float | None = None,
    burst: int | None = None,
    extender_scope: Scope | None = None,
    cpu_split: Side | None = None,
    extender_nice: int | None = None,
    percentage_of_nodes_to_score: int | None = None,
    **scenario_fields: Any,
) -> Preset:
    """`preset` with the command line's changes: which scenarios, the nodes, repetitions, the
    seed, the API budget, the extender approaches' scope, the CPU split, the extender's CPU
    share, an equalised percentageOfNodesToScore, and scenario fields
    (rate, sizes, ...) set on every scenario kept."""
    chosen = preset.scenarios
    if scenarios:
        unknown = set(scenarios) - {s.name for s in chosen}
        if unknown:
            raise ValueError(
                f"unknown scenario {sorted(unknown)[0]!r}; {preset.name} has "
                + ", ".join(s.name for s in chosen)
            )
        chosen = tuple(s for s in chosen if s.name in scenarios)
    fields = {k: v for k, v in scenario_fields.items() if v is not None}
    footing = preset.footing
    if nodes is not None:
        footing = replace(footing, nodes=nodes)
    if qps is not None:
        footing = replace(footing, client_qps=qps)
    if burst is not None:
        footing = replace(footing, client_burst=burst)
    if extender_scope is not None:
        footing = replace(footing, extender_scope=extender_scope)
    if cpu_split:
        footing = replace(footing, cpu_split=cpu_split)
    if extender_nice is not None:
        footing = replace(footing, extender_nice=extender_nice)
    if percentage_of_nodes_to_score is not None:
        footing = replace(footing, percentage_of_nodes_to_score=percentage_of_nodes_to_score)
    return replace(
        preset,
        footing=footing,
        scenarios=tuple(replace(s, **fields) for s in chosen),
        repeat=preset.repeat if repeat is None else repeat,
        seed=preset.seed if seed is None else seed,
    )
