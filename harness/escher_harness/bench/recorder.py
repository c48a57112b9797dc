"""The gang benchmark's pod watch: what the cluster did, as events, and waits on it.

One list-then-watch of the namespace's pods (raw JSON: no client models built, so the load
generator spends little CPU per event) keeps every pod's node and phase. For pods of the
trace's gangs it emits the log's cluster events (escher_harness.bench.trace): a member first
seen bound, Running, Succeeded, a bound member deleted; a placeholder (labelled
puregang.PLACEHOLDER_LABEL) first seen bound or deleted. Every approach is watched the same
way, so "bound" means the same moment for all. The approaches wait on it (bound, succeeded,
gone) instead of polling the API. It also checks every binding against the node's capacity
when given it: a node whose bound, unfinished pods request more cpu or memory than it has is
an over-commit, counted for the report (never expected, from any approach). Run by the
locustfile (in a gevent greenlet: the waits use threading primitives, which locust's
monkey-patching makes cooperative).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from escher_harness.bench.puregang import PLACEHOLDER_LABEL
from escher_harness.bench.trace import Event, Kind
from extender.core.names import CPU, MEMORY
from extender.core.quantity import amount

# The longest watch request: `stop` is looked at least this often.
_REQUEST_SECONDS = 5


@dataclass
class _Pod:
    gang: str
    placeholder: bool
    node: str | None = None
    phases: tuple[str, ...] = ()
    requests: tuple[int, int] = (0, 0)  # cpu (milli), memory (bytes)
    counted: bool = False  # its requests are in its node's usage (bound, not finished)


def requests_of(spec: Mapping[str, Any]) -> tuple[int, int]:
    """The pod's cpu (milli) and memory (bytes) requests, summed over its containers."""
    cpu = memory = 0
    for c in spec.get("containers") or []:
        req = (c.get("resources") or {}).get("requests") or {}
        if CPU in req:
            cpu += amount(CPU, str(req[CPU]), field="cpu")
        if MEMORY in req:
            memory += amount(MEMORY, str(req[MEMORY]), field="memory")
    return cpu, memory


def gang_of(name: str) -> str:
    """Every approach names a gang's pods `<gang>-...`."""
    return name.split("-", 1)[0]


class Recorder:
    def __init__(
        self,
        api: client.ApiClient,
        gangs: Collection[str],
        emit: Callable[[Event], None],
        namespace: str = "default",
        clock: Callable[[], float] = time.time,
        capacity: tuple[int, int] | None = None,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.gangs = frozenset(gangs)
        self.emit = emit
        self.namespace = namespace
        self.clock = clock
        self.synced = threading.Event()  # set once the first list is applied
        self._pods: dict[str, _Pod] = {}
        self._changed = threading.Condition()
        # Every node's cpu (milli) and memory (bytes), for the over-commit check (None: off).
        self.capacity = capacity
        self._used: dict[str, list[int]] = {}
        self.overcommits: list[dict[str, Any]] = []  # each binding that over-committed a node

    # --- what the cluster did -------------------------------------------------------------

    def observe(self, pod: Mapping[str, Any], deleted: bool) -> None:
        """Apply one pod object (as the API serves it) seen listed, changed or deleted."""
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        name = meta["name"]
        t = self.clock()
        with self._changed:
            known = self._pods.get(name)
            if known is None:
                if deleted:
                    return
                labels = meta.get("labels") or {}
                owner = labels.get(PLACEHOLDER_LABEL)
                known = self._pods[name] = _Pod(owner or gang_of(name), owner is not None)
                known.requests = requests_of(spec)
            record = known.gang in self.gangs
            if deleted:
                self._release(known)
                del self._pods[name]
                if known.node and record:
                    kind = Kind.RELEASED if known.placeholder else Kind.UNBOUND
                    self.emit(Event(t, kind, known.gang, name))
            else:
                if spec.get("nodeName") and not known.node:
                    known.node = spec["nodeName"]
                    if status.get("phase") not in _FINISHED:
                        self._hold(name, known, t)
                    if record:
                        kind = Kind.HELD if known.placeholder else Kind.BOUND
                        self.emit(Event(t, kind, known.gang, name, node=known.node))
                phase = status.get("phase")
                if phase and phase not in known.phases:
                    known.phases = (*known.phases, phase)
                    if phase in _FINISHED:
                        self._release(known)
                    if record and not known.placeholder and phase in _PHASE_EVENTS:
                        self.emit(Event(t, _PHASE_EVENTS[phase], known.gang, name))
            self._changed.notify_all()

    def _hold(self, name: str, pod: _Pod, t: float) -> None:
        """Count a newly bound pod on its node, and note it if the node is over-committed."""
        if self.capacity is None or pod.node is None:
            return
        used = self._used.setdefault(pod.node, [0, 0])
        used[0] += pod.requests[0]
        used[1] += pod.requests[1]
        pod.counted = True
        if used[0] > self.capacity[0] or used[1] > self.capacity[1]:
            self.overcommits.append(
                {"t": t, "node": pod.node, "pod": name, "cpu_m": used[0], "memory": used[1]}
            )

    def _release(self, pod: _Pod) -> None:
        if pod.counted and pod.node is not None:
            used = self._used[pod.node]
            used[0] -= pod.requests[0]
            used[1] -= pod.requests[1]
            pod.counted = False

    def run(self, stop: threading.Event) -> None:
        """List, then watch from the list's resourceVersion, until `stop` is set. A watch
        that expires (410 Gone) lists again; pods gone meanwhile count as deleted then."""
        version: str | None = None
        stream: Any = watch.Watch()  # type: ignore[no-untyped-call]
        while not stop.is_set():
            if version is None:
                version = self._list()
                self.synced.set()
                continue
            try:
                for ev in stream.stream(
                    self.core.list_namespaced_pod,
                    self.namespace,
                    resource_version=version,
                    timeout_seconds=_REQUEST_SECONDS,
                    deserialize=False,
                ):
                    obj = ev["object"]
                    version = obj["metadata"]["resourceVersion"]
                    if ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self.observe(obj, ev["type"] == "DELETED")
                    if stop.is_set():
                        stream.stop()
            except ApiException as e:
                if e.status != HTTPStatus.GONE:
                    raise
                version = None

    def _list(self) -> str:
        raw: Any = self.core.list_namespaced_pod(self.namespace, _preload_content=False)
        listed = json.loads(raw.data)
        present = {p["metadata"]["name"] for p in listed["items"]}
        with self._changed:
            gone = [n for n in self._pods if n not in present]
        for name in gone:
            self.observe({"metadata": {"name": name}}, deleted=True)
        for p in listed["items"]:
            self.observe(p, deleted=False)
        return str(listed["metadata"]["resourceVersion"])

    # --- waits ----------------------------------------------------------------------------

    def bound(self, names: Sequence[str], timeout: float) -> int:
        """How many of `names` are bound, once all are or after `timeout` seconds."""
        return self._wait(names, timeout, lambda p: p is not None and p.node is not None)

    def succeeded(self, names: Sequence[str], timeout: float) -> int:
        """How many of `names` have been Succeeded, once all have or after `timeout`."""
        return self._wait(names, timeout, lambda p: p is not None and "Succeeded" in p.phases)

    def gone(self, names: Sequence[str], timeout: float) -> bool:
        """Whether all of `names` are deleted, within `timeout`."""
        return self._wait(names, timeout, lambda p: p is None) == len(names)

    def nodes(self, names: Sequence[str]) -> dict[str, str | None]:
        """Where each of `names` is bound (None: pending or unknown)."""
        with self._changed:
            return {n: p.node if (p := self._pods.get(n)) else None for n in names}

    def pods_of(self, gang: str) -> list[str]:
        """The pods of `gang` (members and placeholders) that exist now."""
        with self._changed:
            return [n for n, p in self._pods.items() if p.gang == gang]

    def _wait(self, names: Sequence[str], timeout: float, ok: Callable[[_Pod | None], bool]) -> int:
        end = time.monotonic() + timeout
        with self._changed:
            while True:
                count = sum(1 for n in names if ok(self._pods.get(n)))
                left = end - time.monotonic()
                if count == len(names) or left <= 0:
                    return count
                self._changed.wait(left)


_PHASE_EVENTS = {"Running": Kind.RUNNING, "Succeeded": Kind.SUCCEEDED}
# Phases whose pods hold no room (kube-scheduler's assigned-pod informer drops them).
_FINISHED = ("Succeeded", "Failed")
