"""PodPatches: patches of pods sent on the event loop without waiting for them, each counted.

What the waker, the lifter and the nominator share: a patch of one pod (or of its status
subresource) that names the pod's UID, so that a new pod that took the name is not touched
(the API server refuses to change a UID); sent through InFlight, so only while this replica
may write and at most `limit` at once; each outcome counted on the caller's counter: `sent`
(or the caller's word for it), `failed` (gone, replaced, the API server away: the caller's
own retry covers it) and `not_sent` when too many were in flight.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import msgspec
from prometheus_client import Counter

from extender.kube.client import ApiError, KubeAPI
from extender.kube.inflight import InFlight

log = logging.getLogger(__name__)

MERGE = "application/merge-patch+json"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"


class PodPatches:
    def __init__(
        self,
        api: KubeAPI,
        counter: Counter,
        may_write: Callable[[], bool],
        limit: int,
        not_sent: str = "deferred",
    ) -> None:
        self._api = api
        self._counter = counter
        self._not_sent = not_sent
        self._inflight = InFlight(may_write, limit)

    def send(
        self,
        namespace: str,
        name: str,
        uid: str,
        body: dict[str, Any],
        what: str,
        *,
        content_type: str = MERGE,
        subresource: str = "",
        outcome: str = "sent",
        ended: Callable[[], None] | None = None,
    ) -> bool:
        """Patch the pod (its `subresource`, if given) with `body` plus its UID; whether it
        was sent, and then `ended()` once the patch is done, failed or cancelled."""
        patch = {**body, "metadata": {**body.get("metadata", {}), "uid": uid}}
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        if subresource:
            path += f"/{subresource}"
        write = lambda: self._patch(path, patch, content_type, what, outcome, ended)  # noqa: E731
        if not self._inflight.send(write):
            self._counter.labels(self._not_sent).inc()
            return False
        return True

    async def aclose(self) -> None:
        """Cancel the patches still in flight (on stop)."""
        await self._inflight.aclose()

    async def _patch(
        self,
        path: str,
        body: dict[str, Any],
        content_type: str,
        what: str,
        outcome: str,
        ended: Callable[[], None] | None,
    ) -> None:
        try:
            await self._api.request(
                "PATCH", path, body=msgspec.json.encode(body), content_type=content_type, what=what
            )
        except ApiError as e:
            self._counter.labels("failed").inc()
            log.info("pod not patched", extra={"what": what, "error": str(e)})
            return
        finally:
            if ended is not None:
                ended()
        self._counter.labels(outcome).inc()
