"""Lifter: removes the gang gate from a held member, so that kube-scheduler may try it.

The gang gate decides whom (GangGate.lift); this patches each pod with a strategic
merge patch that deletes the gate by name (other gates stay) and names the pod's UID, so a
new pod that took the name is not touched (the API server refuses to change a UID). Sent on
the event loop without waiting for it, only while this replica may write, at most `limit` at
once (more wait for the manager's next turn: it names them again after its lift_retry).
Each outcome is counted (escher_gang_lifts_total). Created and called by extender.service.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import msgspec

from extender.adapters.inflight import InFlight
from extender.adapters.kubeapi import ApiError, KubeAPI
from extender.core.pod import PodInfo
from extender.metrics import Metrics

log = logging.getLogger(__name__)

STRATEGIC_MERGE = "application/strategic-merge-patch+json"


class Lifter:
    def __init__(
        self,
        api: KubeAPI,
        gate: str,
        metrics: Metrics,
        may_write: Callable[[], bool],
        limit: int = 1024,
    ) -> None:
        self._api = api
        self._gate = gate
        self._lifts = metrics.gang_lifts
        self._inflight = InFlight(may_write, limit)

    def __call__(self, pod: PodInfo) -> None:
        if not self._inflight.send(lambda: self._lift(pod)):
            self._lifts.labels("deferred").inc()

    async def aclose(self) -> None:
        """Cancel the lifts still in flight (on stop)."""
        await self._inflight.aclose()

    async def _lift(self, pod: PodInfo) -> None:
        body = {
            "metadata": {"uid": pod.uid},
            "spec": {"schedulingGates": [{"name": self._gate, "$patch": "delete"}]},
        }
        try:
            await self._api.request(
                "PATCH",
                f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}",
                body=msgspec.json.encode(body),
                content_type=STRATEGIC_MERGE,
                what=f"lifting the gang gate of pod {pod.key}",
            )
        except ApiError as e:  # gone or replaced: nothing to lift; else asked again later
            self._lifts.labels("failed").inc()
            log.info("gang gate not lifted", extra={"pod": pod.key, "error": str(e)})
            return
        self._lifts.labels("sent").inc()
