"""List and watch one kind of object, and hand every change to a handler: an informer.

`sync()` lists every page (decoding only the fields read, extender.core.objects) and hands
each object to the handler, then tells it which keys exist (so it can drop what vanished
while nobody watched). `run()` then watches from the list's resourceVersion, resumes from the
last one it saw, lists again when the server says the version is too old (410 Gone), and
backs off while the API server fails, forever, until cancelled. Everything runs on the event
loop; a page or an event costs a msgspec decode and the handler, and the loop is yielded to
between pages. The one implementation the cluster view uses for nodes and for pods.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import msgspec

from extender.core.objects import ObjectList, ObjectMeta
from extender.kube.client import ApiError, KubeAPI
from extender.metrics import Metrics

log = logging.getLogger(__name__)


class _Object(Protocol):
    @property
    def metadata(self) -> ObjectMeta: ...


T = TypeVar("T", bound=_Object)

_PAGE = 500
# The server ends each watch after this long; a fresh one resumes from the last version.
_WATCH_SECONDS = 60
_BACKOFF = (0.2, 10.0)
# A watch that ends sooner than this without error is treated like a failure (backoff).
_MIN_WATCH_SECONDS = 1.0


class _Event(msgspec.Struct):
    type: str
    object: msgspec.Raw


class _Versioned(msgspec.Struct):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


class _Status(msgspec.Struct):
    code: int = 0
    message: str = ""


@dataclass
class Handler(Generic[T]):
    """What an informer calls: `event(kind, obj)` for ADDED / MODIFIED / DELETED, and after a
    full list `listed(keys)` with the keys of everything that exists."""

    event: Callable[[str, T], None]
    listed: Callable[[set[str]], None]
    key: Callable[[T], str]


class Informer(Generic[T]):
    def __init__(
        self,
        api: KubeAPI,
        name: str,
        path: str,
        kind: type[T],
        handler: Handler[T],
        metrics: Metrics,
        field_selector: str | None = None,
    ) -> None:
        self.api = api
        self.name = name
        self.path = path
        self.handler = handler
        self.metrics = metrics
        self.field_selector = field_selector
        self._page = msgspec.json.Decoder(ObjectList[kind])  # type: ignore[valid-type]
        self._object = msgspec.json.Decoder(kind)
        self._event = msgspec.json.Decoder(_Event)
        self.resource_version = ""
        self.synced = False

    def _params(self, **more: str) -> dict[str, str]:
        params = dict(more)
        if self.field_selector:
            params["fieldSelector"] = self.field_selector
        return params

    async def sync(self) -> None:
        """List everything, hand it over, and remember where to watch from. ApiError if the
        API server fails (the caller retries)."""
        seen: set[str] = set()
        cont = ""
        restarted = False
        while True:
            params = self._params(limit=str(_PAGE))
            if cont:
                params["continue"] = cont
            try:
                raw = await self.api.request("GET", self.path, params=params, timeout=120.0)
            except ApiError as e:
                # A continue token that expired mid-way: list again from the start, once.
                if e.status == 410 and cont and not restarted:
                    restarted, cont, seen = True, "", set()
                    continue
                raise
            page = self._page.decode(raw)
            for obj in page.items:
                key = self.handler.key(obj)
                if key:
                    seen.add(key)
                    self.handler.event("ADDED", obj)
            cont = page.metadata.continue_
            if not cont:
                self.resource_version = page.metadata.resourceVersion
                break
            await asyncio.sleep(0)  # let the verbs in between pages
        self.handler.listed(seen)
        self.synced = True

    async def run(self) -> None:
        """Watch for ever (until cancelled); call after a successful sync()."""
        delay = _BACKOFF[0]
        relist = False
        while True:
            try:
                if relist:
                    await self.sync()
                    relist = False
                started = asyncio.get_running_loop().time()
                await self._watch()
                if asyncio.get_running_loop().time() - started >= _MIN_WATCH_SECONDS:
                    delay = _BACKOFF[0]
                    continue
                reason = "closed"
            except ApiError as e:
                reason = e.reason
                if reason == "gone":
                    # The version is too old: events were missed, so list and reconcile;
                    # at once the first time, with backoff when it keeps happening.
                    self.metrics.watch_restarts.labels(self.name, reason).inc()
                    log.info("watch expired, listing again", extra={"resource": self.name})
                    relist = True
                    if delay > _BACKOFF[0]:
                        await asyncio.sleep(delay)
                    delay = min(delay * 2, _BACKOFF[1])
                    continue
                log.warning(
                    "watch failed", extra={"resource": self.name, "reason": reason, "error": str(e)}
                )
            self.metrics.watch_restarts.labels(self.name, reason).inc()
            await asyncio.sleep(delay)
            delay = min(delay * 2, _BACKOFF[1])

    async def _watch(self) -> None:
        params = self._params(
            watch="true",
            resourceVersion=self.resource_version,
            allowWatchBookmarks="true",
            timeoutSeconds=str(_WATCH_SECONDS),
        )
        async with self.api.watch(self.path, params, _WATCH_SECONDS + 30.0) as lines:
            async for line in lines:
                try:
                    event = self._event.decode(line)
                    if event.type == "ERROR":
                        status = msgspec.json.decode(event.object, type=_Status)
                        raise ApiError(status.code or 500, status.message, self.path)
                    if event.type == "BOOKMARK":
                        obj = msgspec.json.decode(event.object, type=_Versioned)
                        self.resource_version = (
                            obj.metadata.resource_version or self.resource_version
                        )
                        continue
                    decoded = self._object.decode(event.object)
                except (msgspec.DecodeError, msgspec.ValidationError) as e:
                    log.warning(
                        "malformed watch event skipped",
                        extra={"resource": self.name, "error": str(e)},
                    )
                    continue
                self.handler.event(event.type, decoded)
                self.resource_version = decoded.metadata.resource_version or self.resource_version
