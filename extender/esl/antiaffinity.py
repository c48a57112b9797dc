"""Anti-affinity: no two of the pods on one node.

ESCHER's construction: a resource with capacity 1 on every node (or every node with the
given labels); each pod requests one unit, so a node takes at most one. With `pods` given,
more pods than matching nodes is refused as Unsatisfiable instead of leaving the rest
pending forever. Called by applications, compositions and the /v1/esl endpoints.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from extender.esl.base import BaseESL, Count, ESLParams, NodeSelector, PodRequest
from extender.esl.errors import Unsatisfiable

NAME = "antiaffinity"


class AntiAffinityParams(ESLParams):
    pods: Count | None = Field(None, description="how many pods will ask (checked, optional)")
    node_selector: NodeSelector | None = None


class AntiAffinity(BaseESL[AntiAffinityParams]):
    NAME = NAME
    PREFIX = "anti"
    Params: ClassVar[type[ESLParams]] = AntiAffinityParams

    def apply(self) -> None:
        nodes = self.set(self.short(), 1, node_selector=self.params.node_selector)
        pods = self.params.pods
        if pods is not None and pods > len(nodes):
            self.teardown()
            raise Unsatisfiable(
                f"{pods} anti-affine pods need {pods} nodes; only {len(nodes)} match", "pods"
            )

    def requests_for(self, key: str = "") -> PodRequest:
        self.check_key(key)
        return PodRequest(limits={self.full(): "1"})
