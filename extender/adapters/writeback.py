"""Write-back: keeps the ephemeral resources on the Node objects equal to the ledger.

The ledger decides ephemeral resources in memory; this makes them durable and visible to
kube-scheduler by writing each node's set (NodeView.shown: the capacities, or what bound pods
hold where that is more, after a decrease raced with kube-scheduler's own binds) to its
`status.capacity` and `status.allocatable`
(no kubelet copies one into the other for these names): a JSON merge patch of the status
subresource that names only the domain's keys (null deletes one), so other writers' extended
resources are never touched.

Every patch carries the node's resourceVersion as a precondition (optimistic concurrency):
it applies only to the node state it was computed from. A patch based on a stale view, or
one a deposed leader still had in flight after another replica won the lease and wrote,
fails with 409 Conflict instead of overwriting; the node is then read again and the patch
recomputed (and sent only while this replica may still write). Changes are coalesced (one
patch per node with its full desired set), patched concurrently, and retried per node with
exponential backoff for as long as the node exists.

Created by extender.service. The ledger notifies it of changes (from any thread: the record
is taken under a lock, the wake-up goes to the event loop), the cluster view tells it what
each node shows, and the policy API awaits `wait_durable` to answer only once a change is on
the nodes. It writes only while `may_write()` (this replica leads, or runs alone).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import msgspec

from extender.adapters.kubeapi import ApiError, KubeAPI, merge_patch
from extender.adapters.view import Owned
from extender.core import quantity
from extender.core.ledger import Ledger, NodeView
from extender.metrics import Metrics
from extender.settings import Settings

log = logging.getLogger(__name__)

_CONCURRENCY = 16
_CONFLICT_RETRIES = 3


@dataclass
class _Dirty:
    """Changes of one node not yet on it."""

    # The earliest ledger version not yet written (0: unknown, as after drift).
    first_version: int
    # Monotonic time of the earliest unwritten change (for the lag metric).
    since: float

    def merge(self, other: _Dirty) -> None:
        self.first_version = min(self.first_version, other.first_version)
        self.since = min(self.since, other.since)


@dataclass
class _Seen:
    """What the node showed last: its resourceVersion and the domain's keys there."""

    version: str
    capacity: Owned
    allocatable: Owned
    # A write failed since: read the node again before the next patch (the values are
    # still the last known ones, which a replica that steps down adopts).
    stale: bool = False


class _NodeStatus(msgspec.Struct):
    class _Meta(msgspec.Struct):
        resourceVersion: str = ""

    class _Status(msgspec.Struct):
        capacity: dict[str, str] = {}
        allocatable: dict[str, str] = {}

    metadata: _Meta = msgspec.field(default_factory=_Meta)
    status: _Status = msgspec.field(default_factory=_Status)


class WriteBack:
    def __init__(
        self,
        api: KubeAPI,
        ledger: Ledger,
        settings: Settings,
        metrics: Metrics,
        may_write: Callable[[], bool],
        advertised: Mapping[str, int] | None = None,
    ) -> None:
        self._api = api
        self._ledger = ledger
        self._settings = settings
        self._metrics = metrics
        self._may_write = may_write
        self._prefix = ledger.prefix
        # Resources outside the domain that every node carries, at a fixed value: the
        # markers in extender mode (extender.core.pod.MARKER_CAPACITY says why).
        self._advertised = dict(advertised or {})
        self._lock = threading.Lock()  # _pending: written by the ledger's listener
        self._pending: dict[str, _Dirty] = {}
        self._in_flight: dict[str, _Dirty] = {}
        self._seen: dict[str, _Seen] = {}
        self._retry_at: dict[str, float] = {}
        self._backoff: dict[str, float] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()
        self._decode = msgspec.json.Decoder(_NodeStatus)
        ledger.subscribe(self._on_change)
        metrics.writeback_pending.set_function(lambda: len(self.pending_nodes()))

    # ---- inputs ----------------------------------------------------------------------------

    def _on_change(self, version: int, nodes: frozenset[str]) -> None:
        # Called by the ledger with its lock held, on any thread: record and wake only.
        if not nodes:
            return
        now = time.monotonic()
        with self._lock:
            for n in nodes:
                self._note(n, _Dirty(version, now))
        self._poke()

    def _poke(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake.set)

    def _note(self, node: str, rec: _Dirty) -> None:
        old = self._pending.get(node)
        if old is None:
            self._pending[node] = rec
        else:
            old.merge(rec)

    def node_seen(self, node: str, version: str, capacity: Owned, allocatable: Owned) -> None:
        """What the cluster view saw on a node; a difference from the ledger is re-asserted
        (someone else changed or reset the node, or a patch of ours is not seen yet: then the
        next patch finds nothing to write)."""
        self._seen[node] = _Seen(version, dict(capacity), dict(allocatable))
        view = self._ledger.node(node)
        if view is None or not self._may_write():
            return
        want = self._desired(view)
        if capacity != want or allocatable != want:
            with self._lock:
                self._note(node, _Dirty(0, time.monotonic()))
            self._poke()

    def abandon(self) -> int:
        """Drop every change not on its node yet, and take the node's last known values back
        into the ledger (on stepping down: a replica that does not lead mirrors the nodes,
        and must not write an old change if it leads again later). Returns how many nodes
        had one. A patch still in flight may land: the node's watch event brings it in."""
        with self._lock:
            nodes = self._pending.keys() | self._in_flight.keys()
            self._pending.clear()
        for node in nodes:
            seen = self._seen.get(node)
            if seen is not None:
                shown = {
                    k: v
                    for k, v in seen.allocatable.items()
                    if v is not None and k not in self._advertised
                }
                self._ledger.adopt(node, shown)
        self._progressed()
        return len(nodes)

    def verify_all(self) -> None:
        """Check every node once (on becoming the leader: what the nodes show is what the
        previous leader wrote; anything it left unwritten is written now)."""
        now = time.monotonic()
        with self._lock:
            for n in self._ledger.node_names():
                self._note(n, _Dirty(0, now))
        self._poke()

    # ---- durability ------------------------------------------------------------------------

    def pending_nodes(self) -> list[str]:
        with self._lock:
            return sorted(self._pending.keys() | self._in_flight.keys())

    def _durable(self, node: str, version: int) -> bool:
        for rec in (self._pending.get(node), self._in_flight.get(node)):
            if rec is not None and rec.first_version <= version:
                return False
        return True

    async def wait_durable(self, version: int, nodes: Iterable[str], timeout: float) -> bool:
        """True once every node in `nodes` holds the ledger's state as of `version` or later
        (a node with nothing to write, or that no longer exists, counts as durable). False
        when `timeout` runs out first, or this replica stops leading (it dropped what it had
        not written: abandon)."""
        names = set(nodes)
        deadline = time.monotonic() + timeout
        while True:
            if not self._may_write():
                return False
            with self._lock:
                if all(self._durable(n, version) for n in names):
                    return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            progress = self._progress
            try:
                async with asyncio.timeout(left):
                    await progress.wait()
            except TimeoutError:
                return False

    def _progressed(self) -> None:
        self._progress.set()
        self._progress = asyncio.Event()

    # ---- the writer ------------------------------------------------------------------------

    async def run(self) -> None:
        """Write for ever (until cancelled)."""
        self._loop = asyncio.get_running_loop()
        coalesce = self._settings.writeback_coalesce_seconds
        gate = asyncio.Semaphore(_CONCURRENCY)
        tasks: set[asyncio.Task[None]] = set()
        while True:
            batch, next_at = self._take_ready(time.monotonic())
            if not batch:
                self._wake.clear()
                timeout = None if next_at is None else max(0.0, next_at - time.monotonic())
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
                if coalesce:  # let a burst of changes settle into one patch per node
                    await asyncio.sleep(coalesce)
                continue
            for node, rec in batch:
                await gate.acquire()
                task = asyncio.create_task(self._write(node, rec))
                tasks.add(task)

                def finished(t: asyncio.Task[None]) -> None:
                    tasks.discard(t)
                    gate.release()

                task.add_done_callback(finished)

    def _take_ready(self, now: float) -> tuple[list[tuple[str, _Dirty]], float | None]:
        """The nodes that may be written now (moved to in-flight), and when the next one
        backing off may be."""
        ready: list[tuple[str, _Dirty]] = []
        next_at: float | None = None
        if not self._may_write():
            return ready, now + 0.5  # look again soon: leadership may come
        with self._lock:
            for node in list(self._pending):
                if node in self._in_flight:
                    continue  # one patch per node at a time keeps its patches in order
                at = self._retry_at.get(node, 0.0)
                if at > now:
                    next_at = at if next_at is None else min(next_at, at)
                    continue
                rec = self._pending.pop(node)
                self._in_flight[node] = rec
                ready.append((node, rec))
        return ready, next_at

    async def _write(self, node: str, rec: _Dirty) -> None:
        # The ledger's version first: the node's state read after it is at least that new.
        version = self._ledger.version
        try:
            wrote = await self._converge(node)
        except ApiError as e:
            if e.status == 404:
                self._done(node, rec, version, wrote=False)
                self._seen.pop(node, None)
                return
            self._failed(node, rec, e)
            return
        except _Deposed:
            with self._lock:
                self._in_flight.pop(node, None)
                self._note(node, rec)
            return
        self._done(node, rec, version, wrote)

    async def _converge(self, node: str) -> bool:
        """Patch the node until it shows the ledger's values; True if a patch was sent."""
        wrote = False
        for _ in range(_CONFLICT_RETRIES + 1):
            view = self._ledger.node(node)
            if view is None:
                return wrote  # gone from the ledger: nothing to write
            desired = self._desired(view)
            seen = self._seen.get(node)
            if seen is None or seen.stale:
                seen = await self._read(node)
            body = patch_body(seen, desired)
            if body is None:
                return wrote
            if not self._may_write():
                raise _Deposed
            payload, content_type = merge_patch(body)
            try:
                reply = await self._api.request(
                    "PATCH",
                    f"/api/v1/nodes/{node}/status",
                    body=payload,
                    content_type=content_type,
                    what=f"patching node {node}",
                )
            except ApiError as e:
                if e.status != 409:
                    raise
                self._seen[node] = await self._read(node)  # stale: look, and try again
                continue
            self._seen[node] = self._parse(reply)
            wrote = True
        return wrote

    def _desired(self, view: NodeView) -> dict[str, int]:
        return {**view.shown(), **self._advertised}

    async def _read(self, node: str) -> _Seen:
        reply = await self._api.request(
            "GET", f"/api/v1/nodes/{node}/status", what=f"reading node {node}"
        )
        return self._parse(reply)

    def _parse(self, reply: bytes) -> _Seen:
        status = self._decode.decode(reply)
        return _Seen(
            status.metadata.resourceVersion,
            _owned(status.status.capacity, self._prefix, self._advertised),
            _owned(status.status.allocatable, self._prefix, self._advertised),
        )

    def _done(self, node: str, rec: _Dirty, version: int, wrote: bool) -> None:
        with self._lock:
            self._in_flight.pop(node, None)
            self._backoff.pop(node, None)
            self._retry_at.pop(node, None)
            newer = self._pending.get(node)
            # Changes noted while this write ran are covered if their version is not above
            # the one read before it; a drift report (version 0) stands.
            if newer is not None and 0 < newer.first_version <= version:
                del self._pending[node]
        if wrote:
            self._metrics.writeback_lag_seconds.observe(time.monotonic() - rec.since)
        self._progressed()
        self._wake.set()

    def _failed(self, node: str, rec: _Dirty, e: ApiError) -> None:
        self._metrics.writeback_failures.labels(e.reason).inc()
        s = self._settings
        with self._lock:
            self._in_flight.pop(node, None)
            self._note(node, rec)
            prev = self._backoff.get(node)
            delay = s.writeback_backoff_initial_seconds if prev is None else prev * 2
            delay = min(delay, s.writeback_backoff_max_seconds)
            self._backoff[node] = delay
            self._retry_at[node] = time.monotonic() + delay
        seen = self._seen.get(node)
        if seen is not None:
            seen.stale = True  # look before the next try
        self._wake.set()
        # The first failure of a node is worth a warning; the retries of an outage are not.
        log.log(
            logging.WARNING if prev is None else logging.DEBUG,
            "node status patch failed, will retry",
            extra={"node": node, "reason": e.reason, "retry_in": delay, "error": str(e)},
        )


class _Deposed(Exception):
    """This replica may no longer write (it lost the lease)."""


def patch_body(seen: _Seen, desired: Mapping[str, int]) -> dict[str, object] | None:
    """The merge patch taking the node from what it showed to `desired`, with its
    resourceVersion as the precondition, or None when there is nothing to change.

    Names only the keys that differ, in both capacity and allocatable; null deletes a key.
    """
    diffs: dict[str, dict[str, str | None]] = {}
    for section, now in (("capacity", seen.capacity), ("allocatable", seen.allocatable)):
        diff: dict[str, str | None] = {k: str(v) for k, v in desired.items() if now.get(k) != v}
        diff.update({k: None for k in now if k not in desired})
        if diff:
            diffs[section] = diff
    if not diffs:
        return None
    # Both sections get the same keys: a node's capacity and allocatable stay equal.
    keys = {k for d in diffs.values() for k in d}
    merged = {k: (str(desired[k]) if k in desired else None) for k in keys}
    return {
        "metadata": {"resourceVersion": seen.version},
        "status": {"capacity": merged, "allocatable": dict(merged)},
    }


def _owned(
    resources: Mapping[str, str], prefix: str, advertised: Mapping[str, int]
) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for k, text in resources.items():
        if k.startswith(prefix) or k in advertised:
            try:
                out[k] = quantity.capacity(text, field=k)
            except quantity.InvalidQuantity:
                out[k] = None  # not a value we would write: rewrite it
    return out
