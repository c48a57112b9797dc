"""Binder: creates the Binding of a pod to a node, the extender's half of kube-scheduler's bind.

kube-scheduler delegates binding to the extender (bindVerb), which must then create the
`pods/binding` subresource itself. The Binding names the pod's UID, so the API server binds only
that pod (not a new one that took its name) and only if it is not bound yet. Async and pooled
(extender.kube.client): binds of a gang go out together and take what the API server takes,
without a thread each. Only while `may_write()` (this replica leads). At most `in_flight`
Bindings at a time (settings.scheduling.bind_in_flight): the others wait for one to finish, a
future each, so a gang of 1,024's burst neither takes the whole API pool (which the watches and
the other writers share) nor has its answers all arrive in one loop turn. Called by
extender.scheduling.verbs; every failure is a BindError whose message says what happened.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import msgspec

from extender.kube.client import ApiError, KubeAPI
from extender.metrics import Metrics
from extender.scheduling.verbs import BindError


class Binder:
    def __init__(
        self,
        api: KubeAPI,
        metrics: Metrics,
        may_write: Callable[[], bool],
        in_flight: int = 64,
    ) -> None:
        self._api = api
        self._seconds = metrics.bind_seconds
        self._may_write = may_write
        self._in_flight = asyncio.Semaphore(in_flight)

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        what = f"binding pod {namespace}/{name} to {node}"
        if not self._may_write():
            raise BindError(f"{what}: this replica is not the leader")
        body = msgspec.json.encode(
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name, "namespace": namespace, "uid": uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
        )
        start = time.perf_counter()
        try:
            async with self._in_flight:
                await self._api.request(
                    "POST",
                    f"/api/v1/namespaces/{namespace}/pods/{name}/binding",
                    body=body,
                    what=what,
                )
        except ApiError as e:
            if e.status == 404:
                raise BindError(f"{what}: the pod is gone ({e.message})") from None
            if e.status == 409:
                raise BindError(f"{what}: conflict: {e.message}") from None
            raise BindError(str(e)) from None
        finally:
            self._seconds.observe(time.perf_counter() - start)
