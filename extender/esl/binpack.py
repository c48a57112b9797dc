"""Bin-packing: pods on as few nodes as possible.

Pure approach (ESCHER's construction): an unbounded resource on a small set of nodes (the
fullest ones that still have room), grown by one node when every node of the set is full
for one more pod (`step()`, called by the application while pods are pending, or by the
service's step loop for instances created over HTTP).

Extender approach (the backend scores): the resource is on every node and each pod carries
the annotation `<domain>/pack: <resource>`, so the extender's prioritize sends it to the
feasible node where the resource is most used: packing happens at placement, with no step.
Called by applications, the benchmark and the /v1/esl endpoints.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from extender.core.names import CPU, MEMORY, PODS
from extender.core.quantity import amount
from extender.esl.base import (
    BaseESL,
    Change,
    Count,
    Cpu,
    ESLParams,
    Memory,
    PodRequest,
    room,
)
from extender.policies.api import ClusterState

NAME = "binpack"


class BinPackParams(ESLParams):
    cpu: Cpu = Field("1", description="what each pod requests")
    memory: Memory | None = None
    start_nodes: Count = Field(1, description="nodes in the set at first (pure approach)")


class BinPack(BaseESL[BinPackParams]):
    NAME = NAME
    PREFIX = "pack"
    Params: ClassVar[type[ESLParams]] = BinPackParams

    def need(self) -> dict[str, int]:
        need = {PODS: 1, CPU: amount(CPU, self.params.cpu, field="cpu")}
        if self.params.memory:
            need[MEMORY] = amount(MEMORY, self.params.memory, field="memory")
        return need

    def apply(self) -> None:
        if self.where(self.short()):
            return
        if self.backend.in_path:
            self.set(self.short(), self.backend.unbounded)
            return
        for node in self._next_nodes(self.backend.cluster_state(), self.params.start_nodes):
            self.set(self.short(), self.backend.unbounded, node=node)

    def _next_nodes(self, state: ClusterState, k: int) -> list[str]:
        """Up to k nodes outside the set that have room for a pod, fullest first."""
        need = self.need()
        inside = self.where(self.short())
        rooms = {
            n: room(need, {r: u.available for r, u in res.items()})
            for n, res in state.nodes.items()
            if n not in inside
        }
        return sorted((n for n, r in rooms.items() if r > 0), key=lambda n: (rooms[n], n))[:k]

    def step(self) -> list[Change]:
        if self.backend.in_path:
            return []
        state = self.backend.cluster_state()
        need = self.need()
        inside = self.where(self.short())
        for n in inside:
            res = state.nodes.get(n, {})
            if room(need, {r: u.available for r, u in res.items()}) > 0:
                return []  # the set still has room
        grown: dict[str, int] = {}
        for node in self._next_nodes(state, 1):
            grown = self.set(self.short(), self.backend.unbounded, node=node)
        if not grown:
            return []
        return [Change(resource=self.full(), nodes=grown, why="every node of the set is full")]

    def requests_for(self, key: str = "") -> PodRequest:
        self.check_key(key)
        limits = {self.full(): "1", CPU: self.params.cpu}
        if self.params.memory:
            limits[MEMORY] = self.params.memory
        annotations = {f"{self.backend.domain}/pack": self.short()} if self.backend.in_path else {}
        return PodRequest(limits=limits, annotations=annotations)
