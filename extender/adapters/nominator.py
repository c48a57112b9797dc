"""Nominator: writes a gang member's reserved node into its `status.nominatedNodeName`.

kube-scheduler tries a pod's nominated node first, alone, before it looks at any other
(schedule_one.go, evaluateNominatedNode): when that node passes its filters and the
extender's, the cycle ends there. A member whose place is nominated therefore costs
kube-scheduler one node's filters, one extender filter call naming one node, and no scoring
of the cluster, where it otherwise filtered every node and sent the extender every name.
kube-scheduler also counts nominated pods against the other pods it places on the node
(with their priority or lower): a reservation is then respected by pods that never reach the
extender. When the reservation is released, the nomination is cleared (an empty name).

The gang manager decides what to nominate (GangManager.nominate is this); this patches the
status subresource with a merge patch naming the pod's UID (a new pod that took the name is
not touched), sent on the event loop without waiting for it, only while this replica may
write, at most `limit` at once (a nomination not sent costs only speed: the member's cycle
then looks at every node, as without one). Counted by escher_gang_nominations_total.
Created by extender.adapters.build.
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

MERGE = "application/merge-patch+json"


class Nominator:
    def __init__(
        self, api: KubeAPI, metrics: Metrics, may_write: Callable[[], bool], limit: int = 1024
    ) -> None:
        self._api = api
        self._count = metrics.gang_nominations
        self._inflight = InFlight(may_write, limit)

    def __call__(self, pod: PodInfo, node: str) -> None:
        """Nominate `node` for `pod` ("" clears the nomination)."""
        if not self._inflight.send(lambda: self._patch(pod, node)):
            self._count.labels("deferred").inc()

    async def aclose(self) -> None:
        """Cancel the patches still in flight (on stop)."""
        await self._inflight.aclose()

    async def _patch(self, pod: PodInfo, node: str) -> None:
        body = {"metadata": {"uid": pod.uid}, "status": {"nominatedNodeName": node or None}}
        try:
            await self._api.request(
                "PATCH",
                f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status",
                body=msgspec.json.encode(body),
                content_type=MERGE,
                what=f"nominating node {node!r} for pod {pod.key}",
            )
        except ApiError as e:  # gone or replaced: nothing to nominate
            self._count.labels("failed").inc()
            log.info("nomination not written", extra={"pod": pod.key, "error": str(e)})
            return
        self._count.labels("sent" if node else "cleared").inc()
