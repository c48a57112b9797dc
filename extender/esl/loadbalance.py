"""Load balancing: pods spread evenly over the nodes.

ESCHER's constructions, each pod requesting one unit of a resource on every node (or every
node with the given labels):
- static: capacity ceil(tasks / nodes) per node, so no node takes more than its share;
- dynamic: capacity 1 per node; once every node's unit is used, every node gets one more
  (`step()`), so the spread never gets more than one pod from even.

`step()` is called by the application while its pods are pending (or, for instances created
over HTTP, by the service's step loop). Called by applications, compositions and the
/v1/esl endpoints.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from extender.esl.base import BaseESL, Change, Count, ESLParams, NodeSelector, PodRequest, per_node

NAME = "loadbalance"


class LoadBalanceParams(ESLParams):
    mode: Literal["static", "dynamic"] = "static"
    tasks: Count | None = Field(None, description="how many pods (static mode)")
    node_selector: NodeSelector | None = None

    @model_validator(mode="after")
    def _tasks_if_static(self) -> LoadBalanceParams:
        if self.mode == "static" and self.tasks is None:
            raise ValueError("tasks is required in static mode: the share is ceil(tasks/nodes)")
        return self


class LoadBalance(BaseESL[LoadBalanceParams]):
    NAME = NAME
    PREFIX = "lb"
    Params: ClassVar[type[ESLParams]] = LoadBalanceParams

    def apply(self) -> None:
        if self.where(self.short()):
            return  # dynamic capacities only grow; re-applying must not reset them
        sel = self.params.node_selector
        nodes = self.set(self.short(), 1, node_selector=sel)
        if self.params.mode == "static":
            assert self.params.tasks is not None  # the validator requires it
            share = math.ceil(self.params.tasks / len(nodes))
            if share > 1:
                self.set(self.short(), share, node_selector=sel)

    def step(self) -> list[Change]:
        if self.params.mode == "static":
            return []
        res = self.full()
        used = per_node(self.backend.cluster_state(), res)
        caps = self.where(self.short())
        if any(used.get(n, 0) < cap for n, cap in caps.items()):
            return []
        level = max(caps.values()) + 1
        nodes = self.set(self.short(), level, node_selector=self.params.node_selector)
        return [Change(resource=res, nodes=nodes, why=f"every unit used: {level} per node")]

    def requests_for(self, key: str = "") -> PodRequest:
        self.check_key(key)
        return PodRequest(limits={self.full(): "1"})
