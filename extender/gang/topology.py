"""Topology levels: the node labels that group nodes into domains (zone, block, rack, host).

A hierarchy lists levels outermost first, each a name and the node-label key whose values are
its domains. A gang names a level (by name, or by its label key, as Kueue's and the native
PodGroup's `topology.key` do) that it requires all members to share one domain of, or whose
domains it prefers to span as few of as it can (extender.gang.spec reads the declaration,
extender.gang.plan places it, given a Placement). The default uses the keys the ecosystem
uses: the well-known zone label, Kueue's and GKE's block label, the native PodGroup API's
rack example, and the hostname. `settings.gang.topology` (GangArgs) replaces it. Pure, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A label key: an optional DNS-subdomain prefix and a name (the API server's own rule).
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}$")
_LEVEL = re.compile(r"^[a-z][a-z0-9-]{0,30}$")


@dataclass(frozen=True, slots=True)
class Level:
    name: str
    key: str  # the node label whose values are this level's domains


@dataclass(frozen=True, slots=True)
class Hierarchy:
    levels: tuple[Level, ...]  # outermost first

    def resolve(self, value: str) -> Level | None:
        """The level `value` names, by name or label key; a label key outside the hierarchy
        is a level of its own (the native PodGroup names any node label); None if `value`
        is neither a known name nor a valid label key."""
        for level in self.levels:
            if value in (level.name, level.key):
                return level
        if "/" in value and _KEY.match(value):
            return Level(value, value)
        return None

    def names(self) -> str:
        return ", ".join(f"{lv.name} ({lv.key})" for lv in self.levels)

    def __str__(self) -> str:
        return ",".join(f"{lv.name}={lv.key}" for lv in self.levels)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a gang's members may go, for the planner (extender.gang.plan): all of them in
    one domain of `required`, over as few domains of `preferred` as they can (inside the
    required domain, so a level below it), and first-fit filling the nodes domain by domain
    of `pack` (the hierarchy's levels, outermost first) so that gangs pack and leave whole
    domains free. All three may be given together; none is plain first-fit."""

    required: Level | None = None
    preferred: Level | None = None
    pack: tuple[Level, ...] = ()


DEFAULT = (
    "zone=topology.kubernetes.io/zone,"
    "block=cloud.google.com/gce-topology-block,"
    "rack=topology.kubernetes.io/rack,"
    "host=kubernetes.io/hostname"
)


def parse(text: str) -> Hierarchy:
    """`name=label-key,...`, outermost first. Raises ValueError naming the bad part."""
    levels: list[Level] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, key = part.partition("=")
        name, key = name.strip(), key.strip()
        if not sep or not _LEVEL.match(name):
            raise ValueError(f"topology level {part!r}: expected name=label-key, name [a-z0-9-]")
        if not _KEY.match(key):
            raise ValueError(f"topology level {name}: {key!r} is not a label key")
        if any(lv.name == name or lv.key == key for lv in levels):
            raise ValueError(f"topology level {name}: name or key listed twice")
        levels.append(Level(name, key))
    if len(levels) > 8:
        raise ValueError("topology: at most 8 levels")
    return Hierarchy(tuple(levels))
