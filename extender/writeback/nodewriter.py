"""The write-back's engine: keeps what each node shows of the ledger equal to the ledger.

The ledger decides ephemeral resources in memory; a NodeWriter makes each node's set
(the capacities on Node status, or as ResourceSlices of devices: extender.dra.slices)
durable in the cluster, where kube-scheduler reads it.
Where it goes is the subclass's: Node status in the pure and extender modes
(extender.writeback.nodes.WriteBack), ResourceSlices in the dra mode
(extender.dra.slices.SlicePublisher). This holds what they share: changes are coalesced
(one write per node with its full desired set), written concurrently, one at a time per node
(in order), and retried per node with exponential backoff for as long as the node exists. A
change of the ledger (a policy's) is written before background work (checking every node on
becoming the leader, the markers' first write, re-asserting drift), and no more writes are
taken than can run at once, so a policy change waits for at most the writes already in flight,
never behind a pass over every node (5,000 nodes at 50 QPS take 100 s); the policy API awaits
`wait_durable` to answer only once a change is in the cluster; it writes only while
`may_write()` (this replica leads, or runs alone), and on stepping down drops what it has not
written and takes the cluster's last known values back (abandon).

The ledger notifies it of changes (from any thread: the record is taken under a lock, the
wake-up goes to the event loop); the subclass reports drift (the cluster shows something else)
with `drifted`. Created by extender.cluster.build, run by extender.service.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extender.core.ledger import Ledger
from extender.kube.client import ApiError, background
from extender.kube.informer import Informer
from extender.metrics import Metrics
from extender.writeback.args import WriteBackArgs

log = logging.getLogger(__name__)

_CONCURRENCY = 16


@dataclass
class _Dirty:
    """Changes of one node not yet in the cluster."""

    # The earliest ledger version not yet written (0: unknown, as after drift).
    first_version: int
    # Monotonic time of the earliest unwritten change (for the lag metric).
    since: float
    # A change of the ledger, which a caller may be waiting for (written first), not
    # background work (drift, checks).
    urgent: bool = False

    def merge(self, other: _Dirty) -> None:
        self.first_version = min(self.first_version, other.first_version)
        self.since = min(self.since, other.since)
        self.urgent = self.urgent or other.urgent


class Deposed(Exception):
    """This replica may no longer write (it lost the lease)."""


class NodeWriter(ABC):
    def __init__(
        self,
        ledger: Ledger,
        args: WriteBackArgs,
        metrics: Metrics,
        may_write: Callable[[], bool],
    ) -> None:
        self._ledger = ledger
        self._args = args
        self._metrics = metrics
        self._may_write = may_write
        self._lock = threading.Lock()  # _pending: written by the ledger's listener
        self._pending: dict[str, _Dirty] = {}
        # The pending nodes with a change of the ledger (an ordered set): written first.
        self._urgent: dict[str, None] = {}
        self._in_flight: dict[str, _Dirty] = {}
        self._retry_at: dict[str, float] = {}
        self._backoff: dict[str, float] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()
        ledger.subscribe(self._on_change)
        metrics.writeback_pending.set_function(lambda: len(self.pending_nodes()))

    # ---- what a subclass provides ----------------------------------------------------------

    def informers(self) -> Sequence[Informer[Any]]:
        """What this writer watches of the cluster besides the cluster view (run by the
        service after `sync`)."""
        return ()

    async def sync(self) -> None:
        """Read what the writer needs before the service is ready (after the view's sync)."""
        return  # the Node status writer learns from the view's node events

    @abstractmethod
    async def _converge(self, node: str) -> bool:
        """Write until `node` shows the ledger's values; True if a write was sent. Raises
        ApiError (404: the node is gone) or Deposed (checked before each write)."""

    @abstractmethod
    def _last_known(self, node: str) -> Mapping[str, int] | None:
        """What the cluster showed last for `node`, as the ledger keeps it (abandon)."""

    @abstractmethod
    def _forget(self, node: str) -> None:
        """`node` is gone: drop what is remembered of it."""

    @abstractmethod
    def _stale(self, node: str) -> None:
        """A write to `node` failed: read it again before the next one."""

    # ---- inputs ----------------------------------------------------------------------------

    def _on_change(self, version: int, nodes: frozenset[str]) -> None:
        # Called by the ledger with its lock held, on any thread: record and wake only.
        if not nodes:
            return
        now = time.monotonic()
        with self._lock:
            for n in nodes:
                self._note(n, _Dirty(version, now, urgent=True))
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
        if rec.urgent:
            self._urgent[node] = None

    def drifted(self, node: str) -> None:
        """The cluster shows something else than the ledger for `node` (someone else changed
        or reset it, or a write of ours is not seen yet: then the next write finds nothing
        to do): re-assert the ledger's values."""
        with self._lock:
            self._note(node, _Dirty(0, time.monotonic()))
        self._poke()

    def abandon(self) -> int:
        """Drop every change not in the cluster yet, and take the nodes' last known values
        back into the ledger (on stepping down: a replica that does not lead mirrors the
        cluster, and must not write an old change if it leads again later). Returns how many
        nodes had one. A write still in flight may land: the watch brings it in."""
        with self._lock:
            nodes = self._pending.keys() | self._in_flight.keys()
            self._pending.clear()
            self._urgent.clear()
        for node in nodes:
            self._mirror(node)
        self._progressed()
        return len(nodes)

    def _mirror(self, node: str) -> None:
        shown = self._last_known(node)
        if shown is not None:
            self._ledger.adopt(node, shown)

    def _let_go(self, node: str, rec: _Dirty) -> bool:
        """A write that ended without landing: noted again to retry while this replica
        leads; once it does not, dropped, as `abandon` dropped the rest (a write in flight
        then, failing after it, must not bring its change back), the node's shown values
        taken back into the ledger. True if noted again."""
        leading = self._may_write()
        with self._lock:
            self._in_flight.pop(node, None)
            if leading:
                self._note(node, rec)
        if not leading:
            self._mirror(node)
            self._progressed()
        return leading

    def verify_all(self) -> None:
        """Check every node once (on becoming the leader: what the cluster shows is what the
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
        coalesce = self._args.coalesce_seconds
        tasks: set[asyncio.Task[None]] = set()
        slot = asyncio.Event()  # a write finished: its slot is free

        def finished(t: asyncio.Task[None]) -> None:
            tasks.discard(t)
            slot.set()

        while True:
            free = _CONCURRENCY - len(tasks)
            if not free:
                slot.clear()
                await slot.wait()
                continue
            # No more than can run now: what is noted meanwhile, a policy's change above all,
            # is taken at the next free slot, not after a whole pass over the nodes.
            batch, next_at = self._take_ready(time.monotonic(), free)
            if not batch:
                self._wake.clear()
                timeout = None if next_at is None else max(0.0, next_at - time.monotonic())
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
                if coalesce:  # let a burst of changes settle into one write per node
                    await asyncio.sleep(coalesce)
                continue
            for node, rec in batch:
                task = asyncio.create_task(self._write(node, rec))
                tasks.add(task)
                task.add_done_callback(finished)

    def _take_ready(
        self, now: float, limit: int = _CONCURRENCY
    ) -> tuple[list[tuple[str, _Dirty]], float | None]:
        """Up to `limit` nodes that may be written now, changes of the ledger first (moved to
        in-flight), and when the next one backing off may be."""
        ready: list[tuple[str, _Dirty]] = []
        next_at: float | None = None
        if not self._may_write():
            return ready, now + 0.5  # look again soon: leadership may come
        with self._lock:
            chosen: dict[str, None] = {}
            for names in (self._urgent, self._pending):
                for node in names:
                    if len(chosen) >= limit:
                        break
                    if node in self._in_flight or node in chosen:
                        continue  # one write per node at a time keeps its writes in order
                    at = self._retry_at.get(node, 0.0)
                    if at > now:
                        next_at = at if next_at is None else min(next_at, at)
                        continue
                    chosen[node] = None
            for node in chosen:
                self._urgent.pop(node, None)
                rec = self._pending.pop(node)
                self._in_flight[node] = rec
                ready.append((node, rec))
        return ready, next_at

    async def _write(self, node: str, rec: _Dirty) -> None:
        # The ledger's version first: the node's state read after it is at least that new.
        version = self._ledger.version
        try:
            # Background work (drift, a pass over every node) yields the API budget to the
            # requests that someone waits for: a policy's change, a bind.
            with contextlib.nullcontext() if rec.urgent else background():
                wrote = await self._converge(node)
        except ApiError as e:
            if e.status == 404:
                self._done(node, rec, version, wrote=False)
                self._forget(node)
                return
            self._failed(node, rec, e)
            return
        except Deposed:
            self._let_go(node, rec)
            return
        self._done(node, rec, version, wrote)

    def _check_leading(self) -> None:
        """Raise Deposed unless this replica may still write (call before each write)."""
        if not self._may_write():
            raise Deposed

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
                self._urgent.pop(node, None)
        if wrote:
            self._metrics.writeback_lag_seconds.observe(time.monotonic() - rec.since)
        self._progressed()
        self._wake.set()

    def _failed(self, node: str, rec: _Dirty, e: ApiError) -> None:
        self._metrics.writeback_failures.labels(e.reason).inc()
        args = self._args
        if not self._let_go(node, rec):
            return  # this replica stepped down meanwhile: nothing to retry
        with self._lock:
            prev = self._backoff.get(node)
            delay = args.backoff_initial_seconds if prev is None else prev * 2
            delay = min(delay, args.backoff_max_seconds)
            self._backoff[node] = delay
            self._retry_at[node] = time.monotonic() + delay
        self._stale(node)
        self._wake.set()
        # The first failure of a node is worth a warning; the retries of an outage are not.
        log.log(
            logging.WARNING if prev is None else logging.DEBUG,
            "write-back failed, will retry",
            extra={"node": node, "reason": e.reason, "retry_in": delay, "error": str(e)},
        )
