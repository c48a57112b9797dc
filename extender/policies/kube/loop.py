"""The controller pattern both policy kinds share: an informer's cache, a queue, a loop.

An informer (extender.kube.informer) keeps `cache` {name: object}; every event queues
the name. The leader's loop takes queued names and calls the kind's `reconcile(name)`, at
most `workers` at a time, one at a time per name (KeyedLocks, which the object store's
façade takes too). A failed reconcile is queued again at the next resync; a follower keeps
its cache warm and reconciles nothing, and `everything()` queues every name when it becomes
the leader. Subclassed by extender.policies.kube.resources and .esls; runs on the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import msgspec

from extender.kube.client import ApiError, KubeAPI, merge_patch
from extender.kube.informer import Handler, Informer
from extender.metrics import Metrics
from extender.policies.kube.keyed import KeyedLocks
from extender.policies.kube.objects import ESLObject, ResourceObject, older

log = logging.getLogger(__name__)

T = TypeVar("T", ResourceObject, ESLObject)
# The façade's object writes: the API server answers in milliseconds when it is there, and a
# policy call must answer well within the write-back's wait when it is not.
WRITE_SECONDS = 5.0


class Reconciler(Generic[T]):
    KIND: type[T]
    PLURAL: str

    def __init__(
        self,
        api: KubeAPI,
        path: str,
        metrics: Metrics,
        may_write: Callable[[], bool],
        workers: int = 16,
    ) -> None:
        self.api = api
        self.path = path
        self.may_write = may_write
        self._outcomes = metrics.policy_reconciles
        self.cache: dict[str, T] = {}
        self.locks = KeyedLocks()
        self.decode: msgspec.json.Decoder[T] = msgspec.json.Decoder(self.KIND)
        self.informer: Informer[T] = Informer(
            api,
            self.PLURAL,
            path,
            self.KIND,
            Handler(self._event, self._listed, lambda o: o.metadata.name),
            metrics,
        )
        self._queued: set[str] = set()
        self._wake = asyncio.Event()
        self._workers = asyncio.Semaphore(workers)
        self._tasks: set[asyncio.Task[None]] = set()

    # ---- the cache -----------------------------------------------------------------------

    def _event(self, kind: str, obj: T) -> None:
        name = obj.metadata.name
        if kind == "DELETED":
            self.cache.pop(name, None)
        else:
            self.remember(obj)
        self.queue(name)

    def remember(self, obj: T) -> None:
        """Cache `obj` unless the cache already has a later version (the façade caches what
        it wrote before the watch delivers it). One deleted with no finalizer left is gone
        (the API server removes it in that same write): forgotten, so that the name can be
        used again at once."""
        name = obj.metadata.name
        old = self.cache.get(name)
        if old is not None and not older(
            old.metadata.resource_version, obj.metadata.resource_version
        ):
            return
        if obj.metadata.deletion_timestamp is not None and not obj.metadata.finalizers:
            self.cache.pop(name, None)
        else:
            self.cache[name] = obj

    def _listed(self, names: set[str]) -> None:
        for name in set(self.cache) - names:
            del self.cache[name]
            self.queue(name)

    # ---- the queue -----------------------------------------------------------------------

    def queue(self, name: str) -> None:
        self._queued.add(name)
        self._wake.set()

    def everything(self) -> None:
        for name in self.cache:
            self.queue(name)

    async def run(self) -> None:
        """Reconcile queued names for ever (only while leading)."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self.may_write():
                continue  # kept queued: everything() runs again at the next leadership
            names, self._queued = self._queued, set()
            for name in sorted(names):
                await self._workers.acquire()
                task = asyncio.get_running_loop().create_task(self._one(name))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _one(self, name: str) -> None:
        try:
            async with self.locks.hold(name):
                await self.reconcile(name)
            self._outcomes.labels(self.PLURAL, "ok").inc()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # one object's failure stops no other
            self._outcomes.labels(self.PLURAL, "error").inc()
            log.warning(
                "reconcile failed; retried at the next resync",
                extra={"kind": self.PLURAL, "object": name, "error": str(e)},
            )
        finally:
            self._workers.release()

    # ---- writes --------------------------------------------------------------------------

    async def patch(self, obj: T, patch: dict[str, Any], gone_ok: bool = False) -> T:
        """A merge patch, conditional on the version read (ApiError 409: someone else wrote
        it since); the object it made is cached."""
        meta = {**patch.get("metadata", {}), "resourceVersion": obj.metadata.resource_version}
        body, ctype = merge_patch({**patch, "metadata": meta})
        try:
            raw = await self.api.request(
                "PATCH", f"{self.path}/{obj.metadata.name}", body=body, content_type=ctype
            )
        except ApiError as e:
            if gone_ok and e.status == 404:
                return obj
            raise
        new = self.decode.decode(raw)
        self.remember(new)
        return new

    async def put_status(
        self, name: str, status: dict[str, Any], timeout: float | None = None
    ) -> None:
        """Replace the status (a JSON patch: a merge patch would keep map keys that went)."""
        body = msgspec.json.encode([{"op": "add", "path": "/status", "value": status}])
        try:
            raw = await self.api.request(
                "PATCH",
                f"{self.path}/{name}/status",
                body=body,
                content_type="application/json-patch+json",
                what=f"status of {self.PLURAL}/{name}",
                timeout=timeout,
            )
        except ApiError as e:
            if e.status == 404:
                return  # deleted meanwhile
            raise
        self.remember(self.decode.decode(raw))

    async def reconcile(self, name: str) -> None:
        """Make the ledger what the object says (called with the name's lock held)."""
        raise NotImplementedError

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
