"""Waker: touches a pod so that kube-scheduler retries it (extender.scheduling.requeue decides
which).

A merge patch of one annotation, `<domain>/requeued-at`, set to the time: a pod update, on
which kube-scheduler requeues a pod an extender rejected. The patch names the pod's UID, so
a new pod that took the name is not touched (the API server refuses to change a UID). Sent
on the event loop without waiting for it, only while this replica may write, at most
`limit` at once (more are dropped: kube-scheduler's own retries still come). Each outcome
is counted (escher_requeue_wakes_total). Created by extender.service.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from extender.adapters.inflight import InFlight
from extender.adapters.kubeapi import ApiError, KubeAPI, merge_patch
from extender.metrics import Metrics

log = logging.getLogger(__name__)


class Waker:
    def __init__(
        self,
        api: KubeAPI,
        domain: str,
        metrics: Metrics,
        may_write: Callable[[], bool],
        limit: int = 64,
    ) -> None:
        self._api = api
        self._key = f"{domain}/requeued-at"
        self._wakes = metrics.requeue_wakes
        self._inflight = InFlight(may_write, limit)

    def __call__(self, uid: str, namespace: str, name: str) -> None:
        if not self._inflight.send(lambda: self._touch(uid, namespace, name)):
            self._wakes.labels("dropped").inc()

    async def aclose(self) -> None:
        """Cancel the touches still in flight (on stop)."""
        await self._inflight.aclose()

    async def _touch(self, uid: str, namespace: str, name: str) -> None:
        stamp = f"{time.time():.6f}"
        body = {"metadata": {"uid": uid, "annotations": {self._key: stamp}}}
        payload, content_type = merge_patch(body)
        try:
            await self._api.request(
                "PATCH",
                f"/api/v1/namespaces/{namespace}/pods/{name}",
                body=payload,
                content_type=content_type,
                what=f"waking pod {namespace}/{name}",
            )
        except ApiError as e:  # gone, replaced, or the API server away: nothing to wake
            self._wakes.labels("failed").inc()
            log.debug("pod not woken", extra={"pod": f"{namespace}/{name}", "error": str(e)})
            return
        self._wakes.labels("sent").inc()
