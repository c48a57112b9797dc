"""One node as the ledger keeps it (NodeView, never mutated), and the checks against what is
held there: of a holding before it is taken, of a capacity change before it is applied. Pure.

Made by the ledger (extender.core.ledger); read by the plugins, the gang planner, the ESLs,
the policy API (which runs the checks on a snapshot before a change) and the write-back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from extender.core.errors import Conflict
from extender.core.holdings import Shortfall
from extender.core.objects import Taint

EMPTY: Mapping[str, Any] = MappingProxyType({})  # a default no view can change


class NodeView(NamedTuple):
    """One node at one moment. Never mutated: a change makes a new one. A tuple rather than
    a frozen dataclass: the policy API and the ESLs make thousands at once, and a tuple is
    built in C where a frozen dataclass sets each field through object.__setattr__."""

    name: str
    labels: Mapping[str, str] = EMPTY
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    physical: Mapping[str, int] = EMPTY
    ephemeral: Mapping[str, int] = EMPTY
    used: Mapping[str, int] = EMPTY

    def capacity(self, resource: str) -> int:
        return self.ephemeral.get(resource, self.physical.get(resource, 0))

    def available(self, resource: str) -> int:
        return max(0, self.capacity(resource) - self.used.get(resource, 0))

    def shown(self) -> dict[str, int]:
        """Each ephemeral resource's capacity, or what its holders hold if that is more (the
        listeners are told when it changes with the holdings). Holders can exceed a capacity
        just lowered: the ledger refuses a decrease below what it has seen allocated, but
        kube-scheduler may have placed pods against the old capacity that the watch has not
        reported yet. Neither write-back raises a capacity to it: the Node-status one writes
        the capacities (extender.writeback.nodes), so kube-scheduler finds no room there
        until the holders are below it, and mode dra publishes only the held devices, tainted
        so that none is allocated again (extender.dra.slices)."""
        used = self.used
        return {r: max(cap, used.get(r, 0)) for r, cap in self.ephemeral.items()}


def first_shortfall(
    view: NodeView,
    amounts: Mapping[str, int],
    credit: Mapping[str, int],
    prefix: str,
    physical: bool,
) -> Shortfall | None:
    """The first of `amounts` the node has no room for, `credit` (what the holder holds there
    already) counted free: the ephemeral resources (under `prefix`) always, the physical ones
    it reports if `physical`, the rest not ours to judge."""
    for res, want in amounts.items():
        if want <= 0:
            continue
        if res.startswith(prefix):
            cap = view.ephemeral.get(res, 0)
        elif physical and res in view.physical:
            cap = view.physical[res]
        else:
            continue  # not ours to judge
        free = cap - view.used.get(res, 0) + credit.get(res, 0)
        if free < want:
            return Shortfall(view.name, res, want, max(0, free), cap)
    return None


def check_above_allocated(
    nodes: Mapping[str, NodeView], resource: str, capacity: Mapping[str, int]
) -> None:
    """Conflict if a capacity (not 0, which removes it) is below what pods hold there."""
    problems = [
        f"{n}: {resource} capacity {cap} is below the {held} already allocated"
        for n, cap in capacity.items()
        if 0 < cap < (held := nodes[n].used.get(resource, 0))
    ]
    if problems:
        raise Conflict("; ".join(problems[:5]), "capacity")


def check_unheld(nodes: Mapping[str, NodeView], resource: str, where: Iterable[str]) -> None:
    """Conflict if pods hold `resource` on any of `where` (a delete without force)."""
    held = {n: u for n in where if (u := nodes[n].used.get(resource, 0))}
    if held:
        shown = ", ".join(f"{n} ({u})" for n, u in sorted(held.items())[:5])
        raise Conflict(
            f"{resource} is held on {len(held)} node(s): {shown}; "
            "delete with force=true to remove it anyway",
            "name",
        )


def present(ephemeral: Mapping[str, int]) -> dict[str, int]:
    """A node's resources as the ledger keeps them: a capacity of 0 is no resource (as
    set_capacity's 0 removes one), so a node showing `0` never counts as having it."""
    return {r: v for r, v in ephemeral.items() if v}
