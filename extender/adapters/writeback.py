"""Write-back: keeps the ephemeral resources on the Node objects equal to the ledger.

The ledger decides ephemeral resources in memory; this module makes them durable and visible
to kube-scheduler by writing each node's set to its `status.capacity` and `status.allocatable`
(no kubelet copies one into the other for these names). Changes are coalesced (one merge
patch per dirty node with its full desired set), patched concurrently, and retried with
exponential backoff for as long as the node exists.

Created by extender.service; the ledger calls it on every change (a subscription), the cluster
view calls `mark_dirty` when a node's resources drift from the ledger, and the policy API calls
`wait_durable` to answer only once a change is on the nodes.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Any, cast

import urllib3
from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

from extender.ledger import Ledger
from extender.metrics import Metrics
from extender.resources import InvalidResource, whole_amount
from extender.settings import Settings

log = logging.getLogger(__name__)

_POOL_SIZE = 8
# (connect, read): a hung API server must not hold a worker (or stop()) forever.
_REQUEST_TIMEOUT = (5.0, 30.0)
# A JSON merge patch names only our keys, and null deletes a key (RFC 7386): other writers'
# resources in the same maps are left alone.
_MERGE_PATCH = "application/merge-patch+json"


def failure_reason(exc: BaseException) -> str:
    """A short, bounded label for why a Kubernetes API call failed (metrics and logs)."""
    if isinstance(exc, ApiException):
        status = exc.status or 0
        if status == 0:  # the client's wrapping of TLS errors
            return "unreachable"
        if status == 401:  # the credentials are wrong or expired
            return "unauthorized"
        if status == 403:  # RBAC does not allow the call
            return "forbidden"
        if status == 404:
            return "not_found"
        if status == 409:
            return "conflict"
        if status == 410:
            return "gone"
        if status == 429:
            return "throttled"
        if status >= 500:
            return "server_error"
        return "rejected"
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        return "unreachable"
    return "error"


@dataclass
class _Dirty:
    """Changes of one node that are not yet on it."""

    # The earliest ledger version not yet written; the node holds every state before it.
    # 0 after drift: what is on the node is unknown, so it holds no version.
    first_version: int
    last_version: int
    # Monotonic time of the earliest unwritten change (for the lag metric).
    since: float
    # What is on the node may not be what this process last wrote (drift was reported, or
    # nothing was written yet): the next write must check the node's actual state.
    verify: bool = False

    def merge(self, other: _Dirty) -> None:
        self.first_version = min(self.first_version, other.first_version)
        self.last_version = max(self.last_version, other.last_version)
        self.since = min(self.since, other.since)
        self.verify = self.verify or other.verify


class _NodeGone(Exception):
    """The node no longer exists (in the API server or in the ledger): nothing to write."""


class WriteBack:
    """Start after the ledger was rebuilt from the cluster and before any policy change."""

    def __init__(
        self, api: ApiClient, ledger: Ledger, settings: Settings, metrics: Metrics
    ) -> None:
        self._core = CoreV1Api(api)
        self._ledger = ledger
        self._settings = settings
        self._metrics = metrics
        self._prefix = settings.resource_domain + "/"
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # writer: something became dirty
        self._done = threading.Condition(self._lock)  # wait_durable: a write finished
        self._pending: dict[str, _Dirty] = {}
        self._in_flight: dict[str, _Dirty] = {}
        # What this process last wrote to each node (the base of the next diff).
        self._written: dict[str, dict[str, int]] = {}
        self._backoff: dict[str, float] = {}
        self._retry_at: dict[str, float] = {}
        self._futures: set[Future[None]] = set()
        self._stopping = False
        self._stopped = threading.Event()  # wakes the writer out of its coalescing pause
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        metrics.writeback_pending.set_function(lambda: len(self.pending_nodes()))

    # ---- public ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        # Subscribe before the snapshot so no change is missed. A change that lands between
        # the two is in the snapshot ("written") but not on the node: such nodes are verified.
        self._ledger.subscribe(self._on_change)
        snap = self._ledger.snapshot()
        with self._lock:
            self._written = {n: dict(v.ephemeral) for n, v in snap.nodes.items()}
            for rec in self._pending.values():
                rec.verify = True
        self._pool = ThreadPoolExecutor(_POOL_SIZE, thread_name_prefix="writeback-patch")
        self._thread = threading.Thread(target=self._run, name="writeback", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop writing; waits up to `timeout` for patches in flight. Pending work is dropped
        (the next start re-derives it: the ledger is rebuilt from the nodes)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._stopping = True
            self._work.notify_all()
            self._done.notify_all()
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            with self._lock:
                futures = set(self._futures)
            wait_futures(futures, max(0.0, deadline - time.monotonic()))

    def mark_dirty(self, node: str) -> None:
        """Re-assert the ledger's state on `node`: someone else changed or reset it."""
        with self._lock:
            # Often it is only the view seeing the node before a pending write lands; that
            # write's reply shows the node's real state, so no extra read is spent on it.
            self._note(node, _Dirty(0, 0, time.monotonic(), verify=True))
            self._work.notify()

    def pending_nodes(self) -> list[str]:
        """Nodes whose status is behind the ledger (waiting, backing off or being patched)."""
        with self._lock:
            return sorted(self._pending.keys() | self._in_flight.keys())

    def wait_durable(self, version: int, nodes: Iterable[str], timeout: float) -> bool:
        """True once every node in `nodes` holds the ledger's state as of `version` or later.

        A node with nothing to write (or that no longer exists) counts as durable.
        """
        names = set(nodes)
        deadline = time.monotonic() + timeout
        with self._lock:
            while not all(self._durable(n, version) for n in names):
                left = deadline - time.monotonic()
                if left <= 0 or self._stopping:
                    return False
                self._done.wait(left)
            return True

    # ---- bookkeeping (under self._lock) ---------------------------------------------------

    def _on_change(self, version: int, nodes: frozenset[str]) -> None:
        # Called by the ledger with its lock held: record and wake, nothing else.
        if not nodes:
            return
        now = time.monotonic()
        with self._lock:
            for n in nodes:
                self._note(n, _Dirty(version, version, now))
            self._work.notify()

    def _note(self, node: str, rec: _Dirty) -> None:
        old = self._pending.get(node)
        if old is None:
            self._pending[node] = rec
        else:
            old.merge(rec)

    def _durable(self, node: str, version: int) -> bool:
        for rec in (self._pending.get(node), self._in_flight.get(node)):
            if rec is not None and rec.first_version <= version:
                return False
        return True

    def _take_ready(self, now: float) -> list[tuple[str, _Dirty]]:
        """Move the nodes that may be written now to in-flight."""
        ready: list[tuple[str, _Dirty]] = []
        for node in list(self._pending):
            # One patch per node at a time keeps its patches in order.
            if node not in self._in_flight and self._retry_at.get(node, 0.0) <= now:
                rec = self._pending.pop(node)
                self._in_flight[node] = rec
                ready.append((node, rec))
        return ready

    def _has_ready(self, now: float) -> tuple[bool, float | None]:
        """Whether a node may be written now; else when the next one backing off may."""
        next_at: float | None = None
        for node in self._pending:
            if node in self._in_flight:
                continue
            at = self._retry_at.get(node, 0.0)
            if at <= now:
                return True, None
            next_at = at if next_at is None else min(next_at, at)
        return False, next_at

    # ---- the writer ------------------------------------------------------------------------

    def _run(self) -> None:
        coalesce = self._settings.writeback_coalesce_seconds
        while True:
            with self._lock:
                while not self._stopping:
                    now = time.monotonic()
                    ready, next_at = self._has_ready(now)
                    if ready:
                        break
                    self._work.wait(None if next_at is None else next_at - now)
                if self._stopping:
                    return
            # Let a burst of changes settle so each node gets one patch with all of them.
            if coalesce and self._stopped.wait(coalesce):
                return
            with self._lock:
                if self._stopping:
                    return
                batch = self._take_ready(time.monotonic())
            assert self._pool is not None
            for node, rec in batch:
                try:
                    fut = self._pool.submit(self._write, node, rec)
                except RuntimeError:  # stop() shut the pool down meanwhile
                    return
                with self._lock:
                    self._futures.add(fut)
                fut.add_done_callback(self._forget)

    def _forget(self, fut: Future[None]) -> None:
        with self._lock:
            self._futures.discard(fut)

    def _write(self, node: str, rec: _Dirty) -> None:
        """Runs in the pool: one node's patch, and its outcome recorded."""
        try:
            # Read the version first: the node's state read after it is at least that new.
            version = self._ledger.version
            view = self._ledger.node(node)
            if view is None:
                raise _NodeGone
            desired = dict(view.ephemeral)
            with self._lock:
                known = self._written.get(node)
            if known is None or (rec.verify and known == desired):
                # No record of the node, or nothing to write by a record that may be wrong
                # (with something to write, the patch's reply shows the truth instead): look.
                known = self._owned_on(self._request(self._core.read_node_status, node))
            body = patch_body(known, desired)
            actual = known
            if body is not None:
                # The reply is the node after the patch: the truth to diff against next.
                actual = self._owned_on(
                    self._request(
                        self._core.patch_node_status, node, body, _content_type=_MERGE_PATCH
                    )
                )
        except _NodeGone:
            self._gone(node)
        except ApiException as e:
            if e.status == 404:
                self._gone(node)
            else:
                self._failed(node, rec, failure_reason(e), e)
        except Exception as e:  # connection errors, and anything else: never lose the work
            self._failed(node, rec, failure_reason(e), e)
        else:
            with self._lock:
                self._written[node] = actual
            if actual != desired:
                # Another writer changed our keys meanwhile (or left some we did not know of).
                rec.verify = True
                self._failed(node, rec, "drift", None)
            else:
                self._succeeded(node, rec, version, wrote=body is not None)

    def _request(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        """One API call returning a Node, read as plain JSON (no client models: faster)."""
        resp = cast(
            urllib3.HTTPResponse,
            call(*args, _preload_content=False, _request_timeout=_REQUEST_TIMEOUT, **kwargs),
        )
        try:
            obj = json.loads(resp.data)
        finally:
            resp.release_conn()
        if not isinstance(obj, dict):
            raise ValueError("the API server did not return an object")
        return obj

    def _owned_on(self, node_obj: Mapping[str, Any]) -> dict[str, int]:
        """The extender's resources as the node object has them."""
        status = node_obj.get("status") or {}
        cap = _owned(status.get("capacity") or {}, self._prefix)
        alloc = _owned(status.get("allocatable") or {}, self._prefix)
        # -1 never equals a desired amount, so a key whose two maps disagree is rewritten.
        return {k: cap[k] if cap.get(k) == alloc.get(k) else -1 for k in cap.keys() | alloc}

    def _succeeded(self, node: str, rec: _Dirty, version: int, wrote: bool) -> None:
        now = time.monotonic()
        with self._lock:
            del self._in_flight[node]
            if self._backoff.pop(node, None) is not None:
                log.info("node status patch recovered", extra={"node": node})
            self._retry_at.pop(node, None)
            newer = self._pending.get(node)
            # Changes that came while this write was under way were in it if their version
            # is not above the one read; a drift report that came meanwhile stands.
            if newer is not None and not newer.verify:
                if newer.last_version <= version:
                    del self._pending[node]
                else:
                    newer.first_version = max(newer.first_version, version + 1)
            self._done.notify_all()
            self._work.notify()  # changes that came meanwhile were held back for this node
        if wrote:
            self._metrics.writeback_lag_seconds.observe(now - rec.since)

    def _gone(self, node: str) -> None:
        with self._lock:
            del self._in_flight[node]
            self._written.pop(node, None)
            self._backoff.pop(node, None)
            self._retry_at.pop(node, None)
            self._done.notify_all()
            self._work.notify()
        log.info("node gone, dropping its write-back", extra={"node": node})

    def _failed(self, node: str, rec: _Dirty, reason: str, exc: Exception | None) -> None:
        self._metrics.writeback_failures.labels(reason).inc()
        s = self._settings
        with self._lock:
            del self._in_flight[node]
            self._note(node, rec)
            prev = self._backoff.get(node)
            delay = s.writeback_backoff_initial_seconds if prev is None else prev * 2
            delay = min(delay, s.writeback_backoff_max_seconds)
            self._backoff[node] = delay
            self._retry_at[node] = time.monotonic() + delay
            self._work.notify()
        # The first failure of a node is worth a warning; the retries of an outage are not.
        log.log(
            logging.WARNING if prev is None else logging.DEBUG,
            "node status patch failed, will retry",
            extra={"node": node, "reason": reason, "retry_in": delay, "error": str(exc or "")},
        )


def patch_body(base: Mapping[str, int], desired: Mapping[str, int]) -> dict[str, Any] | None:
    """The merge patch taking a node from `base` to `desired`, or None when they are equal.

    Names only changed keys, with null for removed ones, in both capacity and allocatable.
    """
    diff: dict[str, str | None] = {k: str(v) for k, v in desired.items() if base.get(k) != v}
    diff.update({k: None for k in base if k not in desired})
    if not diff:
        return None
    return {"status": {"capacity": diff, "allocatable": dict(diff)}}


def _owned(resources: Mapping[str, Any], prefix: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for k, q in resources.items():
        if k.startswith(prefix):
            try:
                out[k] = whole_amount(k, q)
            except InvalidResource:
                out[k] = -1  # not a value we would write: rewrite it
    return out
