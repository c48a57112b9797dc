"""Gang (all-or-nothing): a gang's members placed together or not at all.

Extender approach (the extender is in kube-scheduler's path): nothing to create. The pods
carry the gang's declaration (label `<domain>/gang`, annotations `gang-min` and
`gang-timeout`) and the extender's gang feature (extender.gang) reserves a place for every
member at once and binds them together. `apply()` only checks that the gang could ever fit.

Pure approach (ESCHER's construction, plain kube-scheduler matching): `apply()` finds room
for every member in the cluster state and creates a per-gang resource with one unit per
member on the chosen nodes; each member requests one unit and its cpu and memory. There is
no transaction: pods placed elsewhere meanwhile can take the room, and then the members
that do not fit stay pending. `step()` re-plans the units not yet held by a member once
`attempt_seconds` passed since the last plan (ESCHER's rollback and retry, with exponential
backoff); whatever members already bound keep their units. What the paper adds on top,
placeholder pods that first hold the physical resources, needs pods to be created and
deleted: the benchmark's pure runner does that (escher_harness.bench.puregang).

Called by applications, the benchmark and the /v1/esl endpoints.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Annotated, ClassVar

from pydantic import Field, StrictInt

from extender.core.names import CPU, MEMORY, PODS
from extender.core.quantity import amount
from extender.esl.base import Backend, BaseESL, Change, Cpu, ESLParams, Memory, PodRequest
from extender.esl.errors import NoRoom, Unsatisfiable
from extender.gang.spec import MAX_MEMBERS, MAX_TIMEOUT
from extender.policy import ClusterState

NAME = "gang"


class GangParams(ESLParams):
    # The extender's gang feature refuses more members (and longer timeouts) than it keeps.
    members: Annotated[StrictInt, Field(ge=1, le=MAX_MEMBERS)] = Field(
        description="members placed together (gang-min)"
    )
    cpu: Cpu = Field("1", description="what each member requests")
    memory: Memory = "1Gi"
    timeout_seconds: float = Field(
        60.0, gt=0, le=MAX_TIMEOUT, description="extender: how long a reservation waits for members"
    )
    attempt_seconds: float = Field(
        10.0, gt=0, le=3_600, description="pure: how long an attempt waits before re-planning"
    )
    max_backoff_seconds: float = Field(60.0, gt=0, le=3_600)


def plan(state: ClusterState, members: int, need: Mapping[str, int], use: str) -> dict[str, int]:
    """Members per node (the nodes with most room first), or {} when the gang does not fit.
    `use`: "available" (room now) or "capacity" (room in an empty cluster)."""
    room: dict[str, int] = {}
    for node, res in state.nodes.items():
        fits = [getattr(res[r], use) // v if r in res else 0 for r, v in need.items() if v]
        room[node] = min(fits) if fits else 0
    placed: dict[str, int] = {}
    left = members
    for node in sorted(room, key=lambda n: (-room[n], n)):
        if left <= 0 or room[node] <= 0:
            break
        placed[node] = min(room[node], left)
        left -= placed[node]
    return placed if left <= 0 else {}


class Gang(BaseESL[GangParams]):
    NAME = NAME
    PREFIX = "gang"
    Params: ClassVar[type[ESLParams]] = GangParams
    STATE = ("attempts", "backoff")

    def __init__(
        self, backend: Backend, params: GangParams, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(backend, params)
        self.clock = clock
        self.planned_at = 0.0
        self.attempts = 0
        self.backoff = 0.0

    def need(self) -> dict[str, int]:
        p = self.params
        return {
            PODS: 1,
            CPU: amount(CPU, p.cpu, field="cpu"),
            MEMORY: amount(MEMORY, p.memory, field="memory"),
        }

    def apply(self) -> None:
        state = self.backend.cluster_state()
        members, need = self.params.members, self.need()
        if not plan(state, members, need, "capacity"):
            raise Unsatisfiable(
                f"gang {self.params.name}: {members} members of cpu {self.params.cpu}, memory "
                f"{self.params.memory} can never fit the cluster's nodes",
                "members",
            )
        if self.backend.in_path or self.where(self.short()):
            return
        placed = plan(state, members, need, "available")
        if not placed:
            raise NoRoom(f"gang {self.params.name} does not fit now", "members")
        self._place(placed)

    def _place(self, placed: Mapping[str, int]) -> dict[str, int]:
        changed: dict[str, int] = {}
        for node in sorted(set(placed) | set(self.where(self.short()))):
            changed.update(self.set(self.short(), placed.get(node, 0), node=node))
        self.planned_at = self.clock()
        self.attempts += 1
        return changed

    def step(self) -> list[Change]:
        """Pure approach: re-plan the members not placed within attempt_seconds."""
        if self.backend.in_path:
            return []
        wait = self.params.attempt_seconds + self.backoff
        if self.clock() - self.planned_at < wait:
            return []
        state = self.backend.cluster_state()
        held = {
            n: res[self.full()].allocated for n, res in state.nodes.items() if self.full() in res
        }
        missing = self.params.members - sum(held.values())
        if missing <= 0:
            return []
        # Keep the units members hold; find room for the rest anew.
        rest = plan(state, missing, self.need(), "available")
        self.backoff = min(self.params.max_backoff_seconds, max(1.0, self.backoff * 2))
        if not rest:
            self.planned_at = self.clock()
            return []
        placed = dict(held)
        for n, k in rest.items():
            placed[n] = placed.get(n, 0) + k
        changed = self._place({n: k for n, k in placed.items() if k})
        why = f"{missing} of {self.params.members} members not placed: re-planned"
        return [Change(resource=self.full(), nodes=changed, why=why)]

    def requests_for(self, key: str = "") -> PodRequest:
        self.check_key(key)
        p, domain = self.params, self.backend.domain
        limits = {CPU: p.cpu, MEMORY: p.memory}
        if not self.backend.in_path:
            limits[self.full()] = "1"
            return PodRequest(limits=limits)
        return PodRequest(
            limits=limits,
            labels={f"{domain}/gang": p.name},
            annotations={
                f"{domain}/gang-min": str(p.members),
                f"{domain}/gang-timeout": f"{p.timeout_seconds:g}",
            },
        )
