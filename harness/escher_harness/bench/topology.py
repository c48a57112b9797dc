"""Topology in the gang benchmark: which level a gang asks for, and how well it was placed.

The `topology` preset's nodes are labelled into racks, blocks and zones
(escher_harness.localcluster.fakenodes.Topology). A gang's *level* is the smallest one whose
largest domain could hold the whole gang on empty nodes: rack for gangs that fit a rack,
block otherwise (zone, then none, for larger ones). A scenario with required (or preferred)
topology asks for that level; the placement figures are computed against it in every
scenario, so a scenario without topology shows how often gangs land in one domain by chance.

Placement quality, per completed gang, from its members' nodes when it was first complete
(the BOUND events of the run's log carry the node) and the nodes' labels (a pure function of
the node's index, the same one that labelled it):
- domains spanned at each level (rack, block), and the minimum possible: ceil(members / what
  one full domain of that level holds on empty nodes);
- the share of the gang's members in its largest domain at its own level (flux-core's figure:
  1.0 = all in one domain);
- whether it is inside one domain of its own level.
Per run: the % of gangs inside one domain of their level, the mean largest-domain share, and
at rack and block the mean over gangs of spanned / minimum (1.0 = as few as possible). Pure,
no I/O. Called by escher_harness.bench.gang_bench and the locustfile's configuration.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from escher_harness.bench.trace import Event, Kind
from escher_harness.localcluster.fakenodes import Topology, node_index
from extender.core.names import CPU, MEMORY
from extender.core.quantity import amount

# Innermost first: a gang's level is the first that holds it.
LEVELS = ("rack", "block", "zone")
# The levels whose span the report gives (zones are few and large: every gang fits one).
SPAN_LEVELS = ("rack", "block")
MODES = ("", "required", "preferred")


def members_per_node(cpu: str, memory: str, node_cpu: str, node_memory: str, pods: int) -> int:
    """How many members of cpu/memory an empty node of node_cpu/node_memory/pods holds."""
    return min(
        amount(CPU, node_cpu, field="cpu") // max(1, amount(CPU, cpu, field="cpu")),
        amount(MEMORY, node_memory, field="memory")
        // max(1, amount(MEMORY, memory, field="memory")),
        pods,
    )


@dataclass(frozen=True)
class Shape:
    """What the levels and minimums are computed from: the cluster and one member's size."""

    topology: Topology
    nodes: int
    per_node: int  # members an empty node holds

    def capacity(self, level: str) -> int:
        """Members the largest domain of `level` holds on empty nodes."""
        return min(self.nodes, self.topology.nodes_per_domain(level)) * self.per_node

    def level(self, size: int) -> str | None:
        """The smallest level one domain of which holds `size` members (None: no level)."""
        return next((lv for lv in LEVELS if self.capacity(lv) >= size), None)

    def minimum(self, size: int, level: str) -> int:
        return math.ceil(size / self.capacity(level)) if self.per_node else 0


@dataclass(frozen=True)
class Placement:
    """One completed gang's placement."""

    gang: str
    size: int
    level: str | None  # its own level (Shape.level)
    spanned: Mapping[str, int]  # domains its members span, by level
    minimum: Mapping[str, int]  # the fewest domains that could hold it, by level
    largest_share: float  # members in its largest domain of its own level / size

    @property
    def in_one_domain(self) -> bool:
        return self.level is not None and self.spanned[self.level] == 1


def place(gang: str, nodes: Sequence[str], shape: Shape) -> Placement:
    """The placement of `gang`, whose members were bound on `nodes` (one entry a member)."""
    size = len(nodes)
    level = shape.level(size)
    domains = [shape.topology.domains(node_index(n)) for n in nodes]
    spanned = {lv: len({d[lv] for d in domains}) for lv in LEVELS}
    minimum = {lv: shape.minimum(size, lv) for lv in LEVELS}
    share = 0.0
    if level is not None and size:
        share = max(Counter(d[level] for d in domains).values()) / size
    return Placement(gang, size, level, spanned, minimum, share)


def complete_sets(events: Sequence[Event]) -> dict[str, list[str]]:
    """Each gang's members' nodes at the moment it was first complete (trace's definition:
    `size` distinct members bound at once), from the log's SUBMIT, BOUND and UNBOUND."""
    size: dict[str, int] = {}
    bound: dict[str, dict[str, str]] = {}
    out: dict[str, list[str]] = {}
    for e in sorted(events, key=lambda e: e.t):
        if e.kind is Kind.SUBMIT:
            size.setdefault(e.gang, e.size)
        elif e.kind is Kind.BOUND:
            bound.setdefault(e.gang, {})[e.pod] = e.node
        elif e.kind is Kind.UNBOUND:
            bound.get(e.gang, {}).pop(e.pod, None)
        members = bound.get(e.gang, {})
        want = size.get(e.gang, 0)
        if want and e.gang not in out and len(members) >= want:
            out[e.gang] = sorted(members.values())
    return out


def quality(placements: Sequence[Placement]) -> dict[str, Any]:
    """The run's placement figures (see the module's definitions); {} with no gang."""
    if not placements:
        return {}
    leveled = [p for p in placements if p.level is not None]
    out: dict[str, Any] = {"gangs_placed": len(placements)}
    if leveled:
        out["in_one_domain_pct"] = round(
            100 * sum(p.in_one_domain for p in leveled) / len(leveled), 1
        )
        out["largest_share"] = round(statistics.fmean(p.largest_share for p in leveled), 3)
    for lv in SPAN_LEVELS:
        ratios = [p.spanned[lv] / p.minimum[lv] for p in placements if p.minimum[lv]]
        if ratios:
            out[f"span_ratio_{lv}"] = round(statistics.fmean(ratios), 3)
            out[f"spanned_{lv}"] = round(statistics.fmean(p.spanned[lv] for p in placements), 2)
            out[f"minimum_{lv}"] = round(statistics.fmean(p.minimum[lv] for p in placements), 2)
    return out


def run_quality(events: Sequence[Event], shapes: Mapping[str, Shape]) -> dict[str, Any]:
    """quality() of every gang of the log complete at least once; `shapes[gang]` its Shape."""
    placements = [
        place(g, nodes, shapes[g])
        for g, nodes in sorted(complete_sets(events).items())
        if g in shapes and all(nodes)
    ]
    return {
        **quality(placements),
        "per_gang": [
            {
                "gang": p.gang,
                "size": p.size,
                "level": p.level,
                "spanned": dict(p.spanned),
                "minimum": dict(p.minimum),
                "largest_share": round(p.largest_share, 3),
            }
            for p in placements
        ],
    }
