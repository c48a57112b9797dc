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

Topology (`required_topology`, `preferred_topology`: a level's name or node-label key,
resolved against the backend's hierarchy, extender.gang.topology): the pure approach chooses
the nodes by domain (extender.esl.domains: one domain of the required level, best fit; the
fewest of the preferred), and a re-plan stays in the required domain its members already
hold units in. The extender approach passes both to its gang feature as the members'
annotations.

Called by applications, the benchmark and the /v1/esl endpoints.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar

from pydantic import Field, StrictInt

from extender.core.names import CPU, MEMORY, PODS
from extender.core.pod import Keys
from extender.core.quantity import amount
from extender.esl import domains
from extender.esl.base import Backend, BaseESL, Change, Cpu, ESLParams, Memory, PodRequest
from extender.esl.errors import InvalidParameters, NoRoom, Unsatisfiable
from extender.gang.spec import MAX_MEMBERS, MAX_TIMEOUT
from extender.gang.topology import Level
from extender.policies.api import ClusterState

NAME = "gang"
# A level's name or a node-label key (a prefix of up to 253 characters, "/", a name of 63).
TopologyName = Annotated[str, Field(min_length=1, max_length=317)]
_TOPOLOGY = ("required_topology", "preferred_topology")


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
    required_topology: TopologyName | None = Field(
        None,
        description="a topology level (its name, e.g. rack, or node-label key) every member "
        "must share one domain of",
    )
    preferred_topology: TopologyName | None = Field(
        None, description="a topology level whose domains the gang should span fewest of"
    )


def plan(state: ClusterState, members: int, need: Mapping[str, int], use: str) -> dict[str, int]:
    """Members per node (the nodes with most room first), or {} when the gang does not fit.
    `use`: "available" (room now) or "capacity" (room in an empty cluster)."""
    return domains.fill(domains.room(state, need, use), members)


class GangESL(BaseESL[GangParams]):
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
        hierarchy = backend.hierarchy
        levels: dict[str, Level | None] = {}
        for name in _TOPOLOGY:
            value = getattr(params, name)
            levels[name] = None if value is None else hierarchy.resolve(value)
            if value is not None and levels[name] is None:
                raise InvalidParameters(
                    f"{name}: {value[:64]!r} is neither a topology level ({hierarchy.names()}) "
                    "nor a node-label key with a prefix",
                    name,
                )
        self.required, self.preferred = levels["required_topology"], levels["preferred_topology"]

    def _place(self, state: ClusterState, members: int, use: str, **kw: Any) -> domains.Fit:
        return domains.place(state, members, self.need(), use, self.required, self.preferred, **kw)

    def need(self) -> dict[str, int]:
        p = self.params
        return {
            PODS: 1,
            CPU: amount(CPU, p.cpu, field="cpu"),
            MEMORY: amount(MEMORY, p.memory, field="memory"),
        }

    def apply(self) -> None:
        state = self.backend.cluster_state()
        p = self.params
        ever = self._place(state, p.members, "capacity")
        if not ever.placed:
            raise Unsatisfiable(
                f"gang {p.name}: {ever.why}"
                if ever.why
                else f"gang {p.name}: {p.members} members of cpu {p.cpu}, memory "
                f"{p.memory} can never fit the cluster's nodes",
                ever.field,
            )
        if self.backend.in_path or self.where(self.short()):
            return
        now = self._place(state, p.members, "available")
        if not now.placed:
            why = f": {now.why}" if now.why else ""
            raise NoRoom(f"gang {p.name} does not fit now{why}", now.field)
        self._set(now.placed)

    def _set(self, placed: Mapping[str, int]) -> dict[str, int]:
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
        # Keep the units members hold; find room for the rest anew, in the required domain
        # the members hold units in (any, if none does yet).
        within = None
        if self.required is not None and any(held.values()):
            labels, key = state.labels, self.required.key
            within = {labels.get(n, {}).get(key, "") for n, k in held.items() if k}
        rest = self._place(state, missing, "available", within=within).placed
        self.backoff = min(self.params.max_backoff_seconds, max(1.0, self.backoff * 2))
        if not rest:
            self.planned_at = self.clock()
            return []
        placed = dict(held)
        for n, k in rest.items():
            placed[n] = placed.get(n, 0) + k
        changed = self._set({n: k for n, k in placed.items() if k})
        why = f"{missing} of {self.params.members} members not placed: re-planned"
        return [Change(resource=self.full(), nodes=changed, why=why)]

    def requests_for(self, key: str = "") -> PodRequest:
        self.check_key(key)
        p, domain = self.params, self.backend.domain
        limits = {CPU: p.cpu, MEMORY: p.memory}
        if not self.backend.in_path:
            limits[self.full()] = "1"
            return PodRequest(limits=limits)
        keys = Keys.for_domain(domain)
        annotations = {keys.gang_min: str(p.members), keys.gang_timeout: f"{p.timeout_seconds:g}"}
        # As given: the extender resolves them against the same hierarchy (its settings).
        if p.required_topology is not None:
            annotations[keys.gang_required_topology] = p.required_topology
        if p.preferred_topology is not None:
            annotations[keys.gang_preferred_topology] = p.preferred_topology
        return PodRequest(limits=limits, labels={keys.gang: p.name}, annotations=annotations)
