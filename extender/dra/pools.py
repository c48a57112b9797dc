"""What the cluster shows of mode dra's pools: our slices as last seen, per pool and per node,
and the pools of our driver another writer publishes (refused, never overwritten).

Kept by the slice publisher (extender.dra.slices) from its slice informer and its re-reads;
the claims' holdings (extender.dra.claims) ask it which pools are another's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from extender.dra.devices import Want, group_of
from extender.dra.objects import ResourceSlice, capacity_label, taint_key


@dataclass
class Seen:
    """One of our slices as last seen."""

    name: str
    version: str
    generation: int
    count: int  # the pool's resourceSliceCount
    devices: tuple[str, ...]
    tainted: bool = False  # its devices carry the over-capacity taint
    capacity: int | None = None  # the group's capacity, labelled while tainted


def seen_of(s: ResourceSlice, domain: str) -> Seen:
    """What one of our slices shows: its devices, their taint and the capacity label."""
    capacity = s.metadata.labels.get(capacity_label(domain), "")
    key = taint_key(domain)
    return Seen(
        s.metadata.name,
        s.metadata.resource_version,
        s.spec.pool.generation,
        s.spec.pool.resource_slice_count,
        tuple(d.name for d in s.spec.devices),
        any(t.key == key for d in s.spec.devices for t in d.taints),
        int(capacity) if capacity.isdigit() else None,
    )


@dataclass
class PoolSeen:
    node: str
    resource: str  # full name
    slices: dict[str, Seen] = field(default_factory=dict)
    stale: bool = False

    def current(self) -> list[Seen]:
        """The slices of the newest generation (kube-scheduler ignores older ones)."""
        if not self.slices:
            return []
        top = max(s.generation for s in self.slices.values())
        return [s for s in self.slices.values() if s.generation == top]

    def complete(self) -> list[Seen]:
        """The newest generation if complete, else nothing (kube-scheduler uses none)."""
        cur = self.current()
        return cur if cur and len(cur) >= cur[0].count else []

    def units(self) -> int:
        """Devices kube-scheduler sees: 0 while the newest generation is incomplete."""
        return sum(len(s.devices) for s in self.complete())

    def capacity(self) -> int | None:
        """The group's capacity a tainted slice carries, if it does."""
        caps = [s.capacity for s in self.complete() if s.capacity is not None]
        return min(caps) if caps else None

    def unchanged(self, want: Want) -> bool:
        """Whether the pool shows exactly these devices, taints and capacity, in its one slice."""
        if len(self.slices) != 1:
            return False
        (only,) = self.slices.values()
        return (
            only.count == 1
            and only.devices == want.devices
            and only.tainted == want.tainted
            and only.capacity == want.capacity
        )


class Pools:
    """Our pools by name and by node, and the pools of our driver that are another's."""

    def __init__(self, domain: str) -> None:
        self._domain = domain
        self.by_name: dict[str, PoolSeen] = {}  # pool name -> what the cluster shows
        self._by_node: dict[str, set[str]] = {}  # node -> its pool names
        self.foreign: dict[str, str] = {}  # pool name -> slice of our driver not ours

    def of(self, node: str) -> Iterable[str]:
        """The node's pool names."""
        return self._by_node.get(node, ())

    def known(self, node: str) -> bool:
        """Whether the cluster shows any pool of the node."""
        return node in self._by_node

    def put(self, node: str, resource: str, s: ResourceSlice) -> None:
        """One of our slices as written or seen: its pool is added if new."""
        pool = s.spec.pool.name
        seen = self.by_name.get(pool)
        if seen is None:
            seen = self.by_name[pool] = PoolSeen(node, resource)
            self._by_node.setdefault(node, set()).add(pool)
        seen.slices[s.metadata.name] = seen_of(s, self._domain)

    def forget_slice(self, pool: str, name: str) -> None:
        """A slice gone: its pool goes with its last slice."""
        seen = self.by_name.get(pool)
        if seen is not None:
            seen.slices.pop(name, None)
            if not seen.slices:
                self.drop(pool)

    def drop(self, pool: str) -> None:
        seen = self.by_name.pop(pool, None)
        if seen is not None:
            pools = self._by_node.get(seen.node)
            if pools is not None:
                pools.discard(pool)
                if not pools:
                    del self._by_node[seen.node]

    def foreign_in(self, group: str) -> tuple[str, str] | None:
        """Another writer's (pool, slice) among a group's pool names, if any."""
        for pool, name in self.foreign.items():
            if pool == group or pool.startswith(group + "/"):
                return pool, name
        return None

    def shown(self, node: str) -> dict[str, int]:
        """Each resource's capacity as the node's slices show it: the devices of its pools,
        or the capacity a tainted slice carries (its devices are then the held ones)."""
        out: dict[str, int] = {}
        labelled: dict[str, int] = {}
        for pool in self.of(node):
            seen = self.by_name[pool]
            units = seen.units()
            if units:
                out[seen.resource] = out.get(seen.resource, 0) + units
            cap = seen.capacity()
            if cap is not None:
                labelled[seen.resource] = min(cap, labelled.get(seen.resource, cap))
        return {**out, **labelled}

    def devices_shown(self, node: str, group: str) -> list[str]:
        """The devices the newest generation of the group's pools publishes."""
        return [
            d
            for p in self.of(node)
            if group_of(p) == group
            for s in self.by_name[p].current()
            for d in s.devices
        ]

    def resources(self, node: str) -> set[str]:
        """The resources the node's pools publish."""
        return {self.by_name[p].resource for p in self.of(node)}
