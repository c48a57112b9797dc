"""The cluster view: fills the ledger from the API server and keeps it in step with watches.

`rebuild()` lists every node and every bound, active pod (paginated) and records them in the
ledger; the ephemeral capacities come from the nodes themselves, where the write-back made
them durable, so a restarted extender resumes exactly where it stopped. `start()` then watches
nodes and pods from the list's resourceVersion, re-lists and reconciles when the watch expires
(410 Gone), and backs off while the API server fails.

Created and started by extender.service. Reports nodes whose extender-owned resources differ
from the ledger to `on_node_drift` (the write-back's mark_dirty), which re-asserts them.

Pods are watched with a server-side field selector (bound, not Succeeded/Failed): pending pods
are of no interest, and a pod that finishes leaves the selection, which the watch reports as
DELETED. A terminating pod (deletionTimestamp set) still holds its resources until it is gone,
as kube-scheduler counts it, so it stays in the ledger until DELETED.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

from extender.adapters.writeback import failure_reason
from extender.ledger import HolderKind, Ledger
from extender.metrics import Metrics
from extender.resources import amounts, pod_amounts, split
from extender.settings import Settings

log = logging.getLogger(__name__)

_PAGE_SIZE = 500
_POD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
_DONE_PHASES = frozenset({"Succeeded", "Failed"})
# The server ends each watch after this long; a fresh one resumes from the last
# resourceVersion. The client read timeout is longer so a silent connection is noticed too.
_WATCH_SECONDS = 60
_WATCH_TIMEOUT = (5.0, _WATCH_SECONDS + 30.0)
_LIST_TIMEOUT = (5.0, 120.0)
_BACKOFF_INITIAL = 0.2
_BACKOFF_MAX = 10.0
# A watch that ends sooner than this without error is treated like a failure (backoff),
# so a server that closes watches at once is not hammered.
_MIN_WATCH_SECONDS = 1.0
# Malformed objects are skipped: these are the errors reading one can raise.
_MALFORMED = (KeyError, TypeError, AttributeError, ValueError)

_Handler = Callable[[str, Mapping[str, Any]], None]


class RebuildError(Exception):
    """Listing the cluster failed; the message is one line: the reason and the error."""


@dataclass(frozen=True)
class _Resource:
    name: str  # "nodes" or "pods": metrics label and log field
    list_fn: Callable[..., Any]
    field_selector: str | None
    relist: Callable[[], str]  # list, reconcile, return the resourceVersion to watch from
    handle: _Handler


class ClusterView:
    def __init__(
        self,
        api: ApiClient,
        ledger: Ledger,
        settings: Settings,
        metrics: Metrics,
        on_node_drift: Callable[[str], None] | None = None,
    ) -> None:
        self._core = CoreV1Api(api)
        self._ledger = ledger
        self._domain = settings.resource_domain
        self._prefix = settings.resource_domain + "/"
        self._metrics = metrics
        self._on_node_drift = on_node_drift
        # Set once the initial rebuild is done: the ledger reflects the cluster (readiness).
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._streams: set[Any] = set()  # open watch responses, shut down by stop()
        self._threads: list[threading.Thread] = []
        self._rv: dict[str, str] = {}
        self._resources = (
            _Resource("nodes", self._core.list_node, None, self._list_nodes, self._on_node),
            _Resource(
                "pods",
                self._core.list_pod_for_all_namespaces,
                _POD_SELECTOR,
                self._list_pods,
                self._on_pod,
            ),
        )

    # ---- public ---------------------------------------------------------------------------

    def rebuild(self) -> None:
        """Fill the ledger from the cluster: nodes (with the written-back ephemeral resources,
        the durable truth after a restart), then bound pods. If the API fails, counts the
        failure by reason and raises RebuildError, whose message says why in one line."""
        try:
            self._rv["nodes"] = self._list_nodes(initial=True)
            self._rv["pods"] = self._list_pods()
        except Exception as e:
            reason = failure_reason(e)
            self._metrics.rebuild_failures.labels(reason).inc()
            raise RebuildError(f"{reason}: {_one_line(e)}") from e
        self.synced.set()
        log.info(
            "ledger rebuilt from the cluster",
            extra={"nodes": len(self._ledger.node_names()), "resource_version": self._rv},
        )

    def start(self) -> None:
        """Watch nodes and pods from where rebuild() left off."""
        if not self.synced.is_set():
            raise RuntimeError("ClusterView.start() needs a successful rebuild() first")
        if self._threads:
            return
        for res in self._resources:
            t = threading.Thread(
                target=self._run, args=(res,), name=f"watch-{res.name}", daemon=True
            )
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            streams = list(self._streams)
        for resp in streams:
            # Unblocks the thread reading this watch, so it notices the stop at once.
            resp.shutdown()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    # ---- listing -------------------------------------------------------------------------

    def _list_nodes(self, initial: bool = False) -> str:
        seen: set[str] = set()
        rv = ""
        for page in self._pages(self._core.list_node, None):
            rv = page["metadata"].get("resourceVersion", rv)
            for obj in page.get("items") or []:
                name = self._apply_node(obj, initial)
                if name is not None:
                    seen.add(name)
        for name in set(self._ledger.node_names()) - seen:
            log.info("node disappeared while not watched", extra={"node": name})
            self._ledger.remove_node(name)
        return rv

    def _list_pods(self) -> str:
        seen: set[str] = set()
        rv = ""
        for page in self._pages(self._core.list_pod_for_all_namespaces, _POD_SELECTOR):
            rv = page["metadata"].get("resourceVersion", rv)
            for obj in page.get("items") or []:
                uid = self._apply_pod("ADDED", obj)
                if uid is not None:
                    seen.add(uid)
        # Only bound pods are released here: assumed holdings (binds in flight) and
        # reservations are the extender's own and are not in the cluster yet.
        gone = [
            h.holder
            for h in self._ledger.snapshot().holdings.values()
            if h.kind is HolderKind.POD and h.holder not in seen
        ]
        for uid in gone:
            self._ledger.release(uid)
        if gone:
            log.info("released pods that vanished while not watched", extra={"pods": len(gone)})
        return rv

    def _pages(
        self, list_fn: Callable[..., Any], field_selector: str | None
    ) -> Iterator[dict[str, Any]]:
        """Every page of a list. A continue token that expired mid-way restarts the list
        (processing is idempotent, and reconciliation only runs after the last page)."""
        attempts = 0
        cont: str | None = None
        while True:
            try:
                resp = list_fn(
                    limit=_PAGE_SIZE,
                    _continue=cont,
                    field_selector=field_selector,
                    _preload_content=False,
                    _request_timeout=_LIST_TIMEOUT,
                )
            except ApiException as e:
                attempts += 1
                if e.status != 410 or cont is None or attempts > 3:
                    raise
                log.info("list continue token expired, listing again")
                cont = None
                continue
            page = _read_json(resp)
            page.setdefault("metadata", {})
            yield page
            cont = page["metadata"].get("continue") or None
            if cont is None:
                return

    # ---- watching ------------------------------------------------------------------------

    def _run(self, res: _Resource) -> None:
        rv = self._rv[res.name]
        relist = False
        delay = _BACKOFF_INITIAL
        gone = 0  # 410s since the last watch that ran a while
        while not self._stop.is_set():
            try:
                if relist:
                    rv = res.relist()
                    relist = False
                started = time.monotonic()
                rv = self._watch(res, rv)
                if self._stop.is_set():
                    return
                if time.monotonic() - started >= _MIN_WATCH_SECONDS:
                    delay = _BACKOFF_INITIAL
                    gone = 0
                    continue
                reason = "closed"
            except Exception as e:
                if self._stop.is_set():
                    return
                reason = failure_reason(e)
                if reason == "gone":
                    # The resourceVersion is too old: events were missed, so list and
                    # reconcile. At once the first time (routine after a long disconnection),
                    # with backoff if it keeps happening.
                    self._metrics.watch_restarts.labels(res.name, reason).inc()
                    log.info("watch expired, re-listing", extra={"resource": res.name})
                    gone += 1
                    if gone > 1:
                        self._stop.wait(delay)
                        delay = min(delay * 2, _BACKOFF_MAX)
                    relist = True
                    continue
                log.warning(
                    "watch failed", extra={"resource": res.name, "reason": reason, "error": str(e)}
                )
            self._metrics.watch_restarts.labels(res.name, reason).inc()
            self._stop.wait(delay)
            delay = min(delay * 2, _BACKOFF_MAX)

    def _watch(self, res: _Resource, rv: str) -> str:
        """One watch request; returns the resourceVersion to resume from."""
        resp = res.list_fn(
            watch=True,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=_WATCH_SECONDS,
            field_selector=res.field_selector,
            _preload_content=False,
            _request_timeout=_WATCH_TIMEOUT,
        )
        with self._lock:
            self._streams.add(resp)
        try:
            # stop() may have looked at the open streams just before this one was added.
            if self._stop.is_set():
                return rv
            for line in _lines(resp):
                if self._stop.is_set():
                    break
                try:
                    event = json.loads(line)
                    kind, obj = event["type"], event["object"]
                    new_rv = obj.get("metadata", {}).get("resourceVersion")
                except _MALFORMED:
                    log.warning("malformed watch event skipped", extra={"resource": res.name})
                    continue
                if kind == "ERROR":
                    # A Status object; 410 means the resourceVersion is gone.
                    raise ApiException(status=obj.get("code") or 500, reason=obj.get("message"))
                if kind != "BOOKMARK":
                    res.handle(kind, obj)
                if new_rv:
                    rv = new_rv
        finally:
            with self._lock:
                self._streams.discard(resp)
            # An abandoned stream must not go back to the pool half-read.
            resp.close()
            resp.release_conn()
        return rv

    # ---- events --------------------------------------------------------------------------

    def _on_node(self, kind: str, obj: Mapping[str, Any]) -> None:
        if kind == "DELETED":
            try:
                name = obj["metadata"]["name"]
            except _MALFORMED:
                log.warning("malformed node event skipped")
                return
            self._ledger.remove_node(name)
            return
        self._apply_node(obj, initial=False)

    def _on_pod(self, kind: str, obj: Mapping[str, Any]) -> None:
        self._apply_pod(kind, obj)

    def _apply_node(self, obj: Mapping[str, Any], initial: bool) -> str | None:
        """Record a node; returns its name, or None when it is malformed (skipped)."""
        try:
            meta = obj["metadata"]
            name = meta["name"]
            labels = dict(meta.get("labels") or {})
            status = obj.get("status") or {}
            alloc, physical = split(amounts(status.get("allocatable") or {}), self._domain)
            capacity, _ = split(amounts(status.get("capacity") or {}), self._domain)
            if not isinstance(name, str) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
            ):
                raise TypeError("node name and labels must be strings")
        except _MALFORMED as e:
            log.warning("malformed node skipped", extra={"node": _name_of(obj), "error": str(e)})
            return None
        if initial:
            self._ledger.upsert_node(name, labels, physical, alloc)
            return name
        self._ledger.upsert_node(name, labels, physical)
        view = self._ledger.node(name)
        if (
            self._on_node_drift is not None
            and view is not None
            and (alloc != view.ephemeral or capacity != view.ephemeral)
        ):
            log.debug("node resources differ from the ledger", extra={"node": name})
            try:
                self._on_node_drift(name)
            except Exception:
                log.exception("node drift callback failed", extra={"node": name})
        return name

    def _apply_pod(self, kind: str, obj: Mapping[str, Any]) -> str | None:
        """Apply a pod event; returns the uid when the pod now holds resources on a node."""
        try:
            uid = obj["metadata"]["uid"]
            if not isinstance(uid, str) or not uid:
                raise TypeError("metadata.uid must be a non-empty string")
            if kind == "DELETED" or (obj.get("status") or {}).get("phase") in _DONE_PHASES:
                self._ledger.release(uid)
                return None
            node = (obj.get("spec") or {}).get("nodeName")
            if not node:
                # Not bound (yet): an extender bind may be in flight, and its assumed holding
                # must stand until the pod is seen bound or deleted.
                return None
            if not isinstance(node, str):
                raise TypeError("spec.nodeName must be a string")
            held = pod_amounts(obj)
        except _MALFORMED as e:  # InvalidResource is a ValueError
            log.warning("malformed pod skipped", extra={"pod": _name_of(obj), "error": str(e)})
            return None
        self._ledger.observe_bound(uid, node, held)
        return uid


def _read_json(resp: Any) -> dict[str, Any]:
    try:
        out = json.loads(resp.data)
    finally:
        resp.release_conn()
    if not isinstance(out, dict):
        raise ValueError("expected a JSON object from the API server")
    return out


def _lines(resp: Any) -> Iterator[bytes]:
    """The newline-delimited JSON events of a watch, as they arrive."""
    buf = b""
    for chunk in resp.stream(amt=None, decode_content=True):
        buf += chunk
        while (i := buf.find(b"\n")) >= 0:
            line, buf = buf[:i], buf[i + 1 :]
            if line.strip():
                yield line
    if buf.strip():
        yield buf


def _one_line(e: Exception) -> str:
    """An API error as `HTTP 401 Unauthorized: <the Status message>`, not the client's
    multi-line dump of headers and body; other errors as their type and text."""
    if isinstance(e, ApiException) and e.status:
        try:
            message = json.loads(e.body or "")["message"]
        except (ValueError, TypeError, KeyError):
            message = ""
        return f"HTTP {e.status} {e.reason}" + (f": {message}" if message else "")
    return " ".join(f"{type(e).__name__}: {e}".split())


def _name_of(obj: Any) -> str:
    try:
        meta = obj["metadata"]
        ns = meta.get("namespace")
        return f"{ns}/{meta['name']}" if ns else str(meta["name"])
    except _MALFORMED:
        return "?"
