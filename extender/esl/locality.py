"""Data locality: pods run on the node that holds their data.

ESCHER's construction (its two lines): a resource on the node holding the data (or the
nodes with the given labels, e.g. a replica set); each pod requests one unit. `slots`
bounds how many pods may run there at once. Called by applications, compositions and the
/v1/esl endpoints.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from extender.esl.base import (
    BaseESL,
    Count,
    ESLParams,
    NodeName,
    NodeSelector,
    PodRequest,
)

NAME = "locality"


class LocalityParams(ESLParams):
    node: NodeName | None = Field(None, description="the node holding the data")
    node_selector: NodeSelector | None = Field(None, description="or the nodes with these")
    slots: Count | None = Field(
        None, description="pods at once per data node (default: no limit, the backend's unbounded)"
    )

    @model_validator(mode="after")
    def _one_place(self) -> LocalityParams:
        if (self.node is None) == (self.node_selector is None):
            raise ValueError("give exactly one of node, node_selector: where the data is")
        return self


class Locality(BaseESL[LocalityParams]):
    NAME = NAME
    PREFIX = "data"
    Params: ClassVar[type[ESLParams]] = LocalityParams

    def apply(self) -> None:
        p = self.params
        slots = self.backend.unbounded if p.slots is None else p.slots
        self.set(self.short(), slots, node=p.node, node_selector=p.node_selector)

    def requests_for(self, key: str = "") -> PodRequest:
        self.check_key(key)
        return PodRequest(limits={self.full(): "1"})
