"""Soft constraints: ordered alternatives, the first one that can be had.

Pure approach (ESCHER's construction): one alternative at a time. Alternative i is a
resource (unbounded) on its nodes; pods request the current one. If fewer than `pods` are
placed within `timeout_seconds`, `step()` falls back to the next alternative, and the
application resubmits its pending pods with the new `requests_for()` (timeouts and
resubmission: what the extender approach saves).

Extender approach (the backend scores): every alternative at once. Pods request a resource
on the union of the alternatives' nodes and carry `<domain>/prefer: <alt 0>,<alt 1>,...`
(per-alternative marker resources); the extender's prioritize sends each pod to a feasible
node of the best alternative that has one, at once, with no timeout and no resubmission.

`step()` is called by the application while pods are pending (or by the service's step loop
for instances created over HTTP). Called by applications, the benchmark, compositions (OR)
and the /v1/esl endpoints.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import ClassVar

from pydantic import Field

from extender.esl.base import (
    Backend,
    BaseESL,
    Change,
    Count,
    ESLParams,
    PodRequest,
    Target,
    totals,
)

NAME = "soft"


class SoftParams(ESLParams):
    # Few enough that the extender's prefer annotation naming them all stays within the
    # length it reads (extender.core.pod.MAX_VALUE).
    alternatives: list[Target] = Field(
        min_length=1, max_length=64, description="best first; {} is anywhere"
    )
    timeout_seconds: float = Field(30.0, gt=0, description="before falling back (pure)")
    pods: Count = Field(1, description="how many pods the application places")


class Soft(BaseESL[SoftParams]):
    NAME = NAME
    PREFIX = "soft"
    Params: ClassVar[type[ESLParams]] = SoftParams
    STATE = ("current",)

    def __init__(
        self, backend: Backend, params: SoftParams, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(backend, params)
        self.clock = clock
        self.current = 0  # the alternative pods request now (pure approach)
        self.since = 0.0

    def _alt(self, i: int) -> dict[str, int]:
        alt = self.params.alternatives[i]
        return self.set(self.short(str(i)), self.backend.unbounded, alt.node, alt.node_selector)

    def apply(self) -> None:
        if self.where(self.short(str(self.current))):
            return
        if not self.backend.in_path:
            self._alt(self.current)
            self.since = self.clock()
            return
        union: set[str] = set()
        for i in range(len(self.params.alternatives)):
            union |= self._alt(i).keys()
        if any(a.node is None and a.node_selector is None for a in self.params.alternatives):
            self.set(self.short(), self.backend.unbounded)
            return
        for node in sorted(union):
            self.set(self.short(), self.backend.unbounded, node=node)

    def step(self) -> list[Change]:
        if self.backend.in_path or self.current + 1 >= len(self.params.alternatives):
            return []
        state = self.backend.cluster_state()
        placed = sum(totals(state, self.full(str(i)))[1] for i in range(self.current + 1))
        waited = self.clock() - self.since
        if placed >= self.params.pods or waited < self.params.timeout_seconds:
            return []
        self.current += 1
        nodes = self._alt(self.current)
        self.since = self.clock()
        why = (
            f"{self.params.pods - placed} of {self.params.pods} pods not placed within "
            f"{self.params.timeout_seconds:g}s: falling back to alternative {self.current}"
        )
        return [Change(resource=self.full(str(self.current)), nodes=nodes, why=why)]

    def requests_for(self, key: str = "") -> PodRequest:
        self.check_key(key)
        if not self.backend.in_path:
            return PodRequest(limits={self.full(str(self.current)): "1"})
        prefer = ",".join(self.short(str(i)) for i in range(len(self.params.alternatives)))
        return PodRequest(
            limits={self.full(): "1"}, annotations={f"{self.backend.domain}/prefer": prefer}
        )
