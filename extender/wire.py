"""kube-scheduler's extender wire types (k8s.io/kube-scheduler/extender/v1), exactly.

The Go types carry no JSON tags, so kube-scheduler sends the Go field names, capitalised
(`Pod`, `Nodes`, `NodeNames`); tests/fixtures/kube-scheduler-v1.36/ holds requests recorded
from the real kube-scheduler. Go's encoding/json reads replies case-insensitively; we reply
capitalised. Pods and nodes stay plain JSON objects: the extender reads a few fields of them
and echoes nodes back, so validating their full schema would only cost time.

Used by the HTTP routes (extender.app) and the filters.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# Prioritize scores must lie in 0..MAX_SCORE: kube-scheduler multiplies by weight * 10 and
# adds the result to its plugin scores without clamping, so a larger score would dominate.
MAX_SCORE = 10


class _Wire(BaseModel):
    # kube-scheduler versions add fields; ignoring unknown ones keeps us compatible.
    model_config = ConfigDict(extra="ignore")


class NodeList(_Wire):
    """A v1 NodeList, sent when the extender is not nodeCacheCapable."""

    apiVersion: str | None = None
    kind: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    items: list[dict[str, Any]]


class ExtenderArgs(_Wire):
    """Body of filter and prioritize calls."""

    Pod: dict[str, Any]
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None


class ExtenderFilterResult(_Wire):
    """Filter reply: `Nodes` when not nodeCacheCapable (a reply with only NodeNames then
    counts as "no node passed"), `NodeNames` when nodeCacheCapable."""

    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] = Field(default_factory=dict)
    FailedAndUnresolvableNodes: dict[str, str] = Field(default_factory=dict)
    Error: str = ""


class HostPriority(_Wire):
    Host: str
    Score: int = Field(ge=0, le=MAX_SCORE)


class ExtenderBindingArgs(_Wire):
    PodName: str
    PodNamespace: str
    PodUID: str
    Node: str


class ExtenderBindingResult(_Wire):
    Error: str = ""
