"""Co-location (affinity groups): each group's members on one node.

ESCHER's construction: per group, a resource with capacity n (its members) on one node
where the whole group fits; each member requests one unit, so all n can only land there.
The node is chosen from the cluster state: the one with the most room for the group's
cpu / memory / pods (and, inside a composition, the siblings' resources), after the groups
placed before it in the same call. A group that no node could hold even empty is
Unsatisfiable; one that has no room now is NoRoom (retry later).

Called by applications, compositions (extender.esl.compose, which passes the siblings'
per-member needs through `constrain`) and the /v1/esl endpoints.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field

from extender.core.names import CPU, MEMORY, PODS
from extender.core.quantity import amount
from extender.esl.base import (
    MAX_KEYS,
    Backend,
    BaseESL,
    Count,
    Cpu,
    ESLParams,
    Key,
    Memory,
    PodRequest,
    room,
)
from extender.esl.errors import NoRoom, Unsatisfiable
from extender.policies.api import ClusterState

NAME = "colocation"


class ColocationParams(ESLParams):
    groups: dict[Key, Count] = Field(
        min_length=1, max_length=MAX_KEYS, description="group -> members"
    )
    cpu: Cpu | None = Field(None, description="what each member requests")
    memory: Memory | None = None


def plan(
    state: ClusterState, groups: Mapping[str, int], need: Mapping[str, int], use: str
) -> tuple[dict[str, str], str]:
    """A node per group (largest groups first, each on the node with the most room left),
    or ({}, the first group that does not fit). `use`: "available" (now) or "capacity"
    (an empty cluster)."""
    left = {
        n: {r: getattr(u, use) for r, u in res.items() if r in need}
        for n, res in state.nodes.items()
    }
    placed: dict[str, str] = {}
    for group in sorted(groups, key=lambda g: (-groups[g], g)):
        size = groups[group]
        best = max(sorted(left), key=lambda n: room(need, left[n]), default=None)
        if best is None or room(need, left[best]) < size:
            return {}, group
        placed[group] = best
        for r, v in need.items():
            left[best][r] -= v * size
    return placed, ""


class Colocation(BaseESL[ColocationParams]):
    NAME = NAME
    PREFIX = "coloc"
    Params: ClassVar[type[ESLParams]] = ColocationParams

    def __init__(self, backend: Backend, params: ColocationParams) -> None:
        super().__init__(backend, params)
        self._extra: dict[str, int] = {}

    def constrain(self, extra: Mapping[str, int]) -> None:
        """Also need these amounts per member (a composition's siblings' resources)."""
        self._extra = dict(extra)

    def need(self) -> dict[str, int]:
        p = self.params
        need = {PODS: 1, **self._extra}
        if p.cpu:
            need[CPU] = amount(CPU, p.cpu, field="cpu")
        if p.memory:
            need[MEMORY] = amount(MEMORY, p.memory, field="memory")
        return need

    def apply(self) -> None:
        todo = {g: n for g, n in self.params.groups.items() if not self.where(self.short(g))}
        if not todo:
            return
        state = self.backend.cluster_state()
        need = self.need()
        placed, group = plan(state, todo, need, "available")
        if not placed:
            _, never = plan(state, {group: todo[group]}, need, "capacity")
            wants = ", ".join(f"{r}: {v}" for r, v in sorted(need.items()))
            what = f"group {group} of {todo[group]} members ({wants} each)"
            if never:
                raise Unsatisfiable(
                    f"{what} can never share a node: no node is that large", "groups"
                )
            raise NoRoom(f"{what}: no node has room for it now", "groups")
        for group, node in placed.items():
            self.set(self.short(group), todo[group], node=node)

    def request_keys(self) -> list[str]:
        return list(self.params.groups)

    def requests_for(self, key: str = "") -> PodRequest:
        self.check_key(key)
        limits = {self.full(key): "1"}
        if self.params.cpu:
            limits[CPU] = self.params.cpu
        if self.params.memory:
            limits[MEMORY] = self.params.memory
        return PodRequest(limits=limits)

    def node_of(self, group: str) -> str | None:
        return next(iter(self.where(self.short(group))), None)
