#!/usr/bin/env python3
"""Planning a gang in process: the latency of extender.gang.plan.plan alone, the work the
gang filter and the gate lifter do on the event loop before reserving (no ledger, no HTTP).

Nodes of 32 cpu, 128Gi and 110 pods, labelled by the default hierarchy (4 zones, blocks of
100 nodes, racks of 20, the hostname), the nodes in name order. Fill: empty; 90% of the
nodes, drawn at random, with less left free than any member takes ("mixed"); the same nodes
full, but all before the others ("first": first-fit's worst case, every full node passed
over). A gang of `size` members of 1 cpu and 4Gi, each its own Want with its own requests
as the manager builds them, the first one (the member being filtered) limited to the
offered nodes (all of them) as its candidates. Classes: 1 (identical members) or 3 (thirds
of 1, 2 and 0.5 cpu, the last two each with their own tolerations). Topology: none (plain
first-fit, the nodes in the order given), pack (first-fit rack by rack: Placement with the
hierarchy's levels), rack required (a rack takes 640 members: the largest gang fits none,
and the reason is timed), rack preferred, block required. Prints p50 and p99 of `--reps`
plans per case after a warm-up, in milliseconds, and what the plan found.

    .venv/bin/python hack/gang-plan-latency.py [--reps 100] [--sizes 64,256,1024]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from extender.core.constraints import Constraints
from extender.core.ledger import NodeView
from extender.core.objects import Toleration
from extender.gang import topology
from extender.gang.plan import Planned, Want, plan
from extender.gang.topology import Placement

GI = 1024**3
HIERARCHY = topology.parse(topology.DEFAULT)
RACK = HIERARCHY.resolve("rack")
BLOCK = HIERARCHY.resolve("block")
FILLS = {"empty": (0.0, False), "90% mixed": (0.9, False), "90% first": (0.9, True)}
TOPOLOGIES = {
    "none": None,
    "pack": Placement(pack=HIERARCHY.levels),
    "rack required": Placement(required=RACK, pack=HIERARCHY.levels),
    "rack preferred": Placement(preferred=RACK, pack=HIERARCHY.levels),
    "block required": Placement(required=BLOCK, pack=HIERARCHY.levels),
}


def cluster(count: int, full: float, first: bool, rng: random.Random) -> list[NodeView]:
    physical = {"cpu": 32000, "memory": 128 * GI, "pods": 110}
    busy = {"cpu": 31800, "memory": 100 * GI, "pods": 40}  # less than any member left
    views = []
    for i in range(count):
        name = f"node-{i}"
        labels = {
            "topology.kubernetes.io/zone": f"z{i * 4 // count}",
            "cloud.google.com/gce-topology-block": f"b{i // 100}",
            "topology.kubernetes.io/rack": f"r{i // 20}",
            "kubernetes.io/hostname": name,
        }
        used = busy if rng.random() < full else {}
        views.append(NodeView(name, labels, physical=physical, used=used))
    if first:  # first-fit's worst case: the full nodes before any with room
        views.sort(key=lambda v: not v.used)
    return views


def gang(size: int, classes: int, offered: frozenset[str]) -> list[Want]:
    shapes = [(1000, None), (2000, "a"), (500, "b")][:classes]
    wants = []
    for i in range(size):
        cpu, toleration = shapes[i * classes // size]
        constraints = (
            None
            if toleration is None
            else Constraints({}, None, (Toleration(key=toleration, operator="Exists"),), "")
        )
        wants.append(
            Want(
                f"m-{i:05}",
                {"cpu": cpu, "memory": 4 * GI, "pods": 1},
                constraints,
                offered if i == 0 else None,
            )
        )
    return wants


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--sizes", default="64,256,1024")
    p.add_argument("--nodes", default="1000,5000")
    p.add_argument("--seed", type=int, default=1)
    opts = p.parse_args()
    print(
        f"{'nodes':>5} {'full':<9} {'size':>5} {'cls':>3} {'topology':<14} "
        f"{'p50 ms':>7} {'p99 ms':>7}  result"
    )
    for count in (int(x) for x in opts.nodes.split(",")):
        for fill, (full, first) in FILLS.items():
            views = cluster(count, full, first, random.Random(opts.seed))
            offered = frozenset(v.name for v in views)
            for size in (int(x) for x in opts.sizes.split(",")):
                for classes in (1, 3):
                    wants = gang(size, classes, offered)
                    for name, placement in TOPOLOGIES.items():
                        if classes == 3 and name not in ("none", "pack"):
                            continue
                        times = []
                        for _ in range(opts.reps + 5):
                            start = time.perf_counter()
                            result = plan(wants, views, "escher.io/", placement=placement)
                            times.append((time.perf_counter() - start) * 1000)
                        times = times[5:]
                        p99 = statistics.quantiles(times, n=100)[98]
                        said = (
                            f"placed, {result.domains} domain(s)"
                            if isinstance(result, Planned)
                            else result.reason
                        )
                        print(
                            f"{count:>5} {fill:<9} {size:>5} {classes:>3} {name:<14} "
                            f"{statistics.median(times):>7.2f} {p99:>7.2f}  {said}",
                            flush=True,
                        )


if __name__ == "__main__":
    main()
