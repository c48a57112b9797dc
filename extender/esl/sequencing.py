"""Sequencing (signalling): a stage's pods are placed only after the previous stage finished.

ESCHER's construction: each stage's pods request one unit of the stage's resource, and the
resource of stage i+1 is created only when stage i finishes (its "signal"); until then its
pods stay pending, unschedulable for lack of the resource. The first stage's resource is
created by `apply()`. A finished stage's resource is removed.

Who signals: the application, with `signal(stage)` when a stage is done; or `step()`, which
calls it for a stage whose `pods` all held its resource and have all released it (finished
or deleted). For instances created over HTTP, the service's step loop calls `step()`.
Called by applications and the /v1/esl endpoints.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator

from extender.esl.base import (
    MAX_KEYS,
    Backend,
    BaseESL,
    Change,
    Count,
    ESLParams,
    Key,
    NodeSelector,
    PodRequest,
    totals,
)

NAME = "sequencing"


class SequencingParams(ESLParams):
    stages: list[Key] = Field(
        min_length=2, max_length=MAX_KEYS, description="in order; each waits for the one before"
    )
    pods: Count = Field(1, description="pods per stage (per node at most, and for step())")
    node_selector: NodeSelector | None = None

    @field_validator("stages")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"stage names must be unique: {v}")
        return v


class Sequencing(BaseESL[SequencingParams]):
    NAME = NAME
    PREFIX = "seq"
    Params: ClassVar[type[ESLParams]] = SequencingParams
    STATE = ("opened", "finished", "_full")

    def __init__(self, backend: Backend, params: SequencingParams) -> None:
        super().__init__(backend, params)
        self.opened: set[str] = set()
        self.finished: set[str] = set()
        self._full: set[str] = set()  # stages seen with all their pods holding the resource

    def _open(self, stage: str, why: str) -> list[Change]:
        if stage in self.opened:
            return []
        nodes = self.set(
            self.short(stage), self.params.pods, node_selector=self.params.node_selector
        )
        self.opened.add(stage)
        return [Change(resource=self.full(stage), nodes=nodes, why=why)]

    def apply(self) -> None:
        self._open(self.params.stages[0], "the first stage")

    def signal(self, key: str) -> list[Change]:
        """Stage `key` finished: remove its resource and open the next stage's."""
        self.check_key(key)
        stages = self.params.stages
        self.finished.add(key)
        changes: list[Change] = []
        if self.where(self.short(key)):
            self.remove(self.short(key))
            changes.append(Change(resource=self.full(key), nodes={}, why=f"{key} finished"))
        i = stages.index(key)
        if i + 1 < len(stages):
            changes += self._open(stages[i + 1], f"{key} finished")
        return changes

    def step(self) -> list[Change]:
        state = self.backend.cluster_state()
        changes: list[Change] = []
        for stage in self.params.stages:
            if stage not in self.opened or stage in self.finished:
                continue
            _, used = totals(state, self.full(stage))
            if used >= self.params.pods:
                self._full.add(stage)
            elif used == 0 and stage in self._full:
                changes += self.signal(stage)
        return changes

    def request_keys(self) -> list[str]:
        return list(self.params.stages)

    def requests_for(self, key: str = "") -> PodRequest:
        self.check_key(key)
        return PodRequest(limits={self.full(key): "1"})
