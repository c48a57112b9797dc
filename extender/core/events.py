"""Pod events: what the cluster view learns about pods, published to whoever subscribes.

The cluster view (extender.cluster.view) publishes one PodEvent per change of a pod it
watches: added or changed (pending or bound), and gone (deleted, or finished: Succeeded and
Failed pods hold nothing, as kube-scheduler's own cache drops them). The gang feature
subscribes, as Coscheduling's PodGroupManager is fed by the pod informer, and so do the
verbs' record of filtered pods and the requeue of pods turned away (extender.scheduling.requeue).
Subscribers run on the event loop, in order, and must not block. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from extender.core.pod import PodInfo


class PodChange(StrEnum):
    UPSERT = "upsert"  # added or changed, still holding or wanting a place
    GONE = "gone"  # deleted, or finished


@dataclass(frozen=True, slots=True)
class PodEvent:
    change: PodChange
    uid: str
    pod: PodInfo | None  # the pod as now (None for GONE: only the uid matters then)
    # GONE: the ephemeral resources its holding gave back to the ledger (already released).
    freed: Mapping[str, int] = field(default_factory=dict)


PodListener = Callable[[PodEvent], None]


class PodEvents:
    """A topic: the view publishes, subscribers are called in subscription order."""

    def __init__(self) -> None:
        self._listeners: list[PodListener] = []

    def subscribe(self, listener: PodListener) -> None:
        self._listeners.append(listener)

    def publish(self, event: PodEvent) -> None:
        for listener in self._listeners:
            listener(event)
