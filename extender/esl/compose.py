"""Composition of ESLs: AND merges their request vectors, OR tries them in order.

AND (ESCHER: merge the request vectors): every pod requests what each part asks of it, so
it lands only where all parts allow. Parts that choose a node for a group (co-location) are
applied last and told the others' per-member needs (`constrain`), so they pick a node where
those resources exist too. After applying, the composition checks that its `pods` can ever
fit where every requested resource exists (capacities, not what is free now); when they
cannot (anti-affinity of 5 pods AND co-location on one node) it removes what it created and
raises Unsatisfiable naming the conflict, rather than leaving pods pending forever. Any
refusal while applying (a part's, or the backend's) removes what the composition created.
At most one part may be keyed (groups, queues, ...): its keys are the composition's.

OR (ESCHER: soft constraints over alternatives): pods request the first part's vector; if
fewer than `pods` are placed within `timeout_seconds`, `step()` moves to the next, and the
application resubmits its pending pods. Timeouts on both approaches: a prioritize score
cannot choose between request vectors, only between nodes.

Parts are given as ESL instances (Python), or as {kind, params} over HTTP, from which
extender.esl.registry builds them (this module does not know the other ESLs).
`step()` steps every dynamic part. Called by applications and the /v1/esl endpoints.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal, Protocol, cast, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from extender.core.errors import CoreError
from extender.esl.base import (
    ESL,
    MAX_KEYS,
    Backend,
    BaseESL,
    Change,
    Count,
    Dynamic,
    ESLParams,
    PodRequest,
    totals,
)
from extender.esl.errors import ESLError, InvalidParameters, UnknownKey, Unsatisfiable
from extender.policies.api import ClusterState

NAME = "compose"


class Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    params: dict[str, Any]


class ComposeParams(ESLParams):
    op: Literal["and", "or"]
    pods: Count = Field(description="how many pods the composition places")
    parts: list[Part] = Field(
        default_factory=list, max_length=MAX_KEYS, description="the ESLs composed (HTTP)"
    )
    timeout_seconds: float = Field(30.0, gt=0, description="OR: before the next part")


@runtime_checkable
class Placer(Protocol):
    """A part that chooses nodes itself and can take its siblings' needs into account."""

    def constrain(self, extra: dict[str, int]) -> None: ...


class Compose(BaseESL[ComposeParams]):
    NAME = NAME
    PREFIX = "compose"
    Params: ClassVar[type[ESLParams]] = ComposeParams

    def __init__(
        self,
        backend: Backend,
        params: ComposeParams,
        parts: Sequence[ESL] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(backend, params)
        if parts is None:
            # Over HTTP, extender.esl.registry builds the parts from params.parts.
            raise InvalidParameters("parts: a composition is built from its parts", "parts")
        self.parts = list(parts)
        if len(self.parts) < 2:
            raise InvalidParameters("parts: a composition needs at least two parts", "parts")
        keyed = [p for p in self.parts if p.request_keys() != [""]]
        if params.op == "and" and len(keyed) > 1:
            names = ", ".join(f"{p.NAME} {p.params.name}" for p in keyed)
            raise InvalidParameters(f"parts: at most one part may be keyed, not {names}", "parts")
        self.clock = clock
        self.current = 0  # OR: the part pods request now
        self.since = 0.0

    # ---- lifecycle --------------------------------------------------------------------

    def apply(self) -> None:
        try:
            if self.params.op == "or":
                for p in self.parts:
                    p.apply()
                self.since = self.clock()
                return
            placers = [p for p in self.parts if isinstance(p, Placer)]
            others = [p for p in self.parts if not isinstance(p, Placer)]
            for p in others:
                p.apply()
            for p in placers:
                cast(Placer, p).constrain(self._needs([q for q in self.parts if q is not p]))
                p.apply()
            self._check(self.backend.cluster_state())
        except (ESLError, CoreError) as e:  # a part refused by the backend too
            self.teardown()
            e.args = (f"composition {self.params.name}: {e}",)
            raise

    def _needs(self, parts: Sequence[ESL]) -> dict[str, int]:
        """Per pod, the ephemeral amounts the unkeyed `parts` ask for."""
        need: dict[str, int] = {}
        for p in parts:
            if p.request_keys() == [""]:
                for r, v in self._ephemeral(p.requests_for("")).items():
                    need[r] = max(need.get(r, 0), v)
        return need

    def _ephemeral(self, req: PodRequest) -> dict[str, int]:
        prefix = self.backend.domain + "/"
        return {r: int(v) for r, v in req.limits.items() if r.startswith(prefix)}

    def _check(self, state: ClusterState) -> None:
        """Unsatisfiable unless `pods` could fit, by capacity, where all requests exist.
        Parts that create their resources only when stepped (fair share and queues start
        every user at 0) have none yet: what they ask for is not judged here."""
        later = {
            r
            for p in self.parts
            if isinstance(p, Dynamic) and not p.resources()
            for key in p.request_keys()
            for r in self._ephemeral(p.requests_for(key))
        }
        fit = 0
        for key in self.request_keys():
            want = {
                r: v for r, v in self._ephemeral(self.requests_for(key)).items() if r not in later
            }
            for res in state.nodes.values():
                if all(r in res for r in want):
                    fit += min(res[r].capacity // v for r, v in want.items())
        if fit < self.params.pods:
            asks = ", ".join(f"{r}: {v}" for r, v in sorted(self._needs(self.parts).items()))
            parts = " AND ".join(f"{p.NAME} {p.params.name}" for p in self.parts)
            raise Unsatisfiable(
                f"{parts} can never hold {self.params.pods} pods: where every resource they "
                f"request exists ({asks}), at most {fit} fit",
                "pods",
            )

    def teardown(self) -> None:
        for p in self.parts:
            p.teardown()

    def resources(self) -> list[str]:
        return sorted({r for p in self.parts for r in p.resources()})

    def state(self) -> dict[str, Any]:
        return {"current": self.current, "parts": [p.state() for p in self.parts]}

    def restore(self, state: Mapping[str, Any], where: Callable[[str], dict[str, int]]) -> None:
        current = state.get("current")
        if isinstance(current, int) and not isinstance(current, bool):
            self.current = min(max(current, 0), len(self.parts) - 1)
        parts = state.get("parts")
        for part, st in zip(self.parts, parts if isinstance(parts, list) else [], strict=False):
            if isinstance(st, dict):
                part.restore(st, where)

    # ---- requests -----------------------------------------------------------------------

    def request_keys(self) -> list[str]:
        keys = [k for p in self.parts for k in p.request_keys() if k]
        return list(dict.fromkeys(keys)) or [""]

    def _part_request(self, part: ESL, key: str) -> PodRequest:
        if key in part.request_keys():
            return part.requests_for(key)
        if part.request_keys() == [""]:
            return part.requests_for("")
        raise UnknownKey(f"{part.NAME} {part.params.name} has no key {key!r}", "key")

    def requests_for(self, key: str = "") -> PodRequest:
        self.check_key(key)
        if self.params.op == "or":
            return self._part_request(self.parts[self.current], key)
        req = self._part_request(self.parts[0], key)
        for p in self.parts[1:]:
            req = req.merge(self._part_request(p, key))
        return req

    # ---- over time ----------------------------------------------------------------------

    def step(self) -> list[Change]:
        parts = self.parts if self.params.op == "and" else self.parts[: self.current + 1]
        changes = [c for p in parts if isinstance(p, Dynamic) for c in p.step()]
        if self.params.op == "or" and self.current + 1 < len(self.parts):
            changes += self._fall_back()
        return changes

    def _placed(self, part: ESL, state: ClusterState) -> int:
        """Pods holding `part`'s resources: per key, the least held of its own requested."""
        own = set(part.resources())
        placed = 0
        for key in part.request_keys():
            held = [totals(state, r)[1] for r in part.requests_for(key).limits if r in own]
            placed += min(held, default=0)
        return placed

    def _fall_back(self) -> list[Change]:
        if self.clock() - self.since < self.params.timeout_seconds:
            return []
        state = self.backend.cluster_state()
        placed = sum(self._placed(p, state) for p in self.parts[: self.current + 1])
        if placed >= self.params.pods:
            return []
        self.current += 1
        self.since = self.clock()
        nxt = self.parts[self.current]
        why = (
            f"{self.params.pods - placed} pods not placed within "
            f"{self.params.timeout_seconds:g}s: falling back to {nxt.NAME} {nxt.params.name}"
        )
        return [Change(resource=r, nodes={}, why=why) for r in nxt.resources()]
