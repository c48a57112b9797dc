"""Waker: touches a pod so that kube-scheduler retries it (extender.scheduling.requeue decides
which).

A merge patch of one annotation, `<domain>/requeued-at`, set to the time: a pod update, on
which kube-scheduler requeues a pod an extender rejected. Sent through PodPatches (the pod's
UID named, at most `limit` in flight: more are dropped, kube-scheduler's own retries still
come). Each outcome is counted (escher_requeue_wakes_total). Created by
extender.scheduling.kube.build.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from extender.kube.client import KubeAPI
from extender.kube.podpatches import PodPatches
from extender.metrics import Metrics


class Waker:
    def __init__(
        self,
        api: KubeAPI,
        domain: str,
        metrics: Metrics,
        may_write: Callable[[], bool],
        limit: int = 64,
    ) -> None:
        self._key = f"{domain}/requeued-at"
        self._patches = PodPatches(api, metrics.requeue_wakes, may_write, limit, "dropped")

    def __call__(self, uid: str, namespace: str, name: str) -> None:
        body = {"metadata": {"annotations": {self._key: f"{time.time():.6f}"}}}
        self._patches.send(namespace, name, uid, body, f"waking pod {namespace}/{name}")

    async def aclose(self) -> None:
        """Cancel the touches still in flight (on stop)."""
        await self._patches.aclose()
