"""The facts a scheduling decision is made on and the values it returns.

PodInfo is what the extender knows of a pod (computed once per call from its JSON by
extender.verbs); Rejection is why a node cannot take it. Shared by the filter plugins
(extender.filters), gang scheduling (extender.gang) and the verbs; pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PodInfo:
    """What the plugins need of a pod, computed once per call."""

    uid: str
    namespace: str
    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    # Everything the pod occupies (cpu in millicores), and the ephemeral subset of it.
    amounts: Mapping[str, int]
    ephemeral: Mapping[str, int]
    raw: Mapping[str, Any]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Rejection:
    """Why a node cannot take the pod. `unresolvable`: preemption could not help."""

    reason: str
    unresolvable: bool = False
