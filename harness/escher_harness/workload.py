"""Pods as a workload: create pods that request resources, watch them get scheduled, run
and finish.

Used by the demo, the benchmarks and the end-to-end tests to drive the real kube-scheduler.
A pod is "placed" once kube-scheduler (or the extender's bind) sets spec.nodeName. With kwok
(the local control plane's default) a placed pod then goes Running, and one made with a
run_time goes Succeeded that long after (escher_harness.localcluster.kwok): wait_phase
watches for that. Without kwok placed pods stay Pending.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from escher_harness.listwatch import list_then_watch, list_then_watch_raw
from escher_harness.localcluster.kwok import RUN_TIME_ANNOTATION, format_run_time

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


def pod_manifest(
    name: str,
    limits: Mapping[str, str] | None = None,
    requests: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    scheduler_name: str = "default-scheduler",
    run_time: float | None = None,
    scheduling_gates: Sequence[str] = (),
) -> dict[str, Any]:
    """A pod that asks to be placed. Extended resources go in limits, as Kubernetes requires
    (requests, if given, must equal limits). With `run_time` (seconds, >= 0) kwok moves it
    from Running to Succeeded that long after it went Running; without, it runs until deleted.
    `scheduling_gates` are created with it (kube-scheduler waits until all are removed).
    ValueError for a run_time kwok cannot read (negative, infinite, NaN)."""
    if run_time is not None:
        annotations = {**(annotations or {}), RUN_TIME_ANNOTATION: format_run_time(run_time)}
    resources: dict[str, Any] = {}
    if limits:
        resources["limits"] = dict(limits)
    if requests:
        resources["requests"] = dict(requests)
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": resources}],
    }
    if scheduling_gates:
        spec["schedulingGates"] = [{"name": g} for g in scheduling_gates]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }


def raw_pods(
    core: client.CoreV1Api, names: Iterable[str], namespace: str = "default"
) -> dict[str, dict[str, Any]]:
    """The named pods of `namespace` as the API server returns them (JSON, by name): for
    fields read by their wire names (conditions, scheduling gates)."""
    wanted = set(names)
    raw: Any = core.list_namespaced_pod(namespace, _preload_content=False)
    return {
        p["metadata"]["name"]: p
        for p in json.loads(raw.data)["items"]
        if p["metadata"]["name"] in wanted
    }


@dataclass(frozen=True)
class Placement:
    name: str
    node: str | None  # None: still pending
    reason: str  # why it is pending (the PodScheduled condition), or ""


@dataclass
class Progress:
    """What a watch saw of one pod: when it was first seen bound and first seen in each
    phase (time.monotonic()). A state the pod was already in when the watch began counts as
    seen when the watch listed it."""

    bound: float | None = None
    phases: dict[str, float] = field(default_factory=dict)


def _placement(pod: Mapping[str, Any]) -> Placement:
    reason = ""
    for c in pod.get("status", {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            reason = c.get("message") or c.get("reason") or ""
    return Placement(pod["metadata"]["name"], pod["spec"].get("nodeName"), reason)


@dataclass(frozen=True)
class PodChange:
    t: float  # wall clock
    name: str
    labels: Mapping[str, str]
    node: str | None
    deleted: bool  # a bound pod was deleted (else: it was first seen bound)


class Workload:
    def __init__(self, api: client.ApiClient, namespace: str = "default") -> None:
        self.core = client.CoreV1Api(api)
        self.namespace = namespace

    def create(self, manifest: Mapping[str, Any]) -> None:
        # The typed client wants a V1Pod; a plain manifest serialises the same.
        self.core.create_namespaced_pod(self.namespace, cast(Any, manifest))

    def delete_labelled(self, selector: str, timeout: float = 120.0) -> None:
        """Delete every pod `selector` matches at once, and wait until they are gone
        (RuntimeError after `timeout`)."""
        self.core.delete_collection_namespaced_pod(
            self.namespace, label_selector=selector, grace_period_seconds=0
        )
        deadline = time.monotonic() + timeout
        while self.core.list_namespaced_pod(self.namespace, label_selector=selector, limit=1).items:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the pods {selector} were not deleted in {timeout:g}s")
            time.sleep(0.2)

    def delete(self, names: Iterable[str]) -> None:
        for name in names:
            try:
                self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
            except ApiException as e:
                if e.status != 404:
                    raise

    def placements(self, names: Iterable[str]) -> dict[str, Placement]:
        wanted = set(names)
        raw: Any = self.core.list_namespaced_pod(self.namespace, _preload_content=False)
        return {
            p["metadata"]["name"]: _placement(p)
            for p in json.loads(raw.data)["items"]
            if p["metadata"]["name"] in wanted
        }

    def wait(
        self,
        names: Iterable[str],
        timeout: float,
        bound: int | None = None,
        settle: float = 0.0,
    ) -> dict[str, Placement]:
        """Watch until `bound` of `names` (default: all) are placed, or `timeout`; return
        where each of `names` that exists is.

        With `settle`, keep watching that long after reaching the target, so pods that must
        NOT be placed get the chance to be placed wrongly (and caught).
        """
        wanted = set(names)
        target = len(wanted) if bound is None else bound
        deadline = time.monotonic() + timeout
        now: dict[str, Placement] = {}
        placed: set[str] = set()
        reached: list[float] = []  # when the target was first reached

        def seen(pod: dict[str, Any], deleted: bool) -> None:
            name = pod["metadata"]["name"]
            if name not in wanted:
                return
            if deleted:
                now.pop(name, None)
                placed.discard(name)
            else:
                now[name] = _placement(pod)
                if now[name].node:
                    placed.add(name)
            if not reached and len(placed) >= target:
                reached.append(time.monotonic())

        list_then_watch_raw(
            self.core.list_namespaced_pod,
            self.namespace,
            seen=seen,
            done=lambda: bool(reached) and time.monotonic() - reached[0] >= settle,
            until=lambda: min(deadline, reached[0] + settle) if reached else deadline,
        )
        return now

    def nodes(self, names: Sequence[str]) -> dict[str, str | None]:
        """Where each of `names` is bound (None: pending or gone)."""
        placed = self.placements(names)
        return {n: placed[n].node if n in placed else None for n in names}

    def bound(self, names: Sequence[str], timeout: float) -> int:
        """How many of `names` are bound once all are, or after `timeout`."""
        return sum(1 for p in self.wait(names, timeout).values() if p.node)

    def watch(self, stop: threading.Event, on_change: Callable[[PodChange], None]) -> None:
        """Report pod changes as they happen until `stop` is set: every pod that is, or
        becomes, bound (once), and every bound pod deleted. Resumes from the last
        resourceVersion, so nothing is missed between watch requests."""
        seen: set[str] = set()
        rv = ""
        w: Any = watch.Watch()  # type: ignore[no-untyped-call]
        while not stop.is_set():
            for ev in w.stream(
                self.core.list_namespaced_pod,
                self.namespace,
                resource_version=rv,
                timeout_seconds=1,
            ):
                p = ev["object"]
                rv = p.metadata.resource_version or rv
                name, node = p.metadata.name, p.spec.node_name
                if ev["type"] == "DELETED" and name in seen:
                    seen.discard(name)
                    on_change(PodChange(time.time(), name, p.metadata.labels or {}, node, True))
                elif node and name not in seen and ev["type"] != "DELETED":
                    seen.add(name)
                    on_change(PodChange(time.time(), name, p.metadata.labels or {}, node, False))
                if stop.is_set():
                    w.stop()
                    break

    def wait_phase(self, names: Iterable[str], phase: str, timeout: float) -> dict[str, Progress]:
        """Watch `names` until every one has been seen in `phase` (e.g. "Running",
        "Succeeded") or `timeout` passes, and return what was seen of each, also of the
        phases on the way (a pod never seen is missing). One list, then watch events: no
        polling interval blurs the times."""
        wanted = set(names)
        progress: dict[str, Progress] = {}

        def seen(pod: client.V1Pod, deleted: bool) -> None:
            name = pod.metadata.name if pod.metadata else ""
            if deleted or name not in wanted or pod.spec is None:
                return
            now = time.monotonic()
            mine = progress.setdefault(name, Progress())
            if mine.bound is None and pod.spec.node_name:
                mine.bound = now
            if pod.status is not None and pod.status.phase:
                mine.phases.setdefault(pod.status.phase, now)

        list_then_watch(
            self.core.list_namespaced_pod,
            self.namespace,
            seen=seen,
            done=lambda: all(n in progress and phase in progress[n].phases for n in wanted),
            deadline=time.monotonic() + timeout,
        )
        return progress

    def watch_bound(self, want: int, stop: threading.Event) -> dict[str, float]:
        """When each pod was first seen bound (time.monotonic()), until `want` are or `stop`
        is set. For throughput measurements: no polling interval."""
        seen: dict[str, float] = {}

        def on_change(c: PodChange) -> None:
            if not c.deleted:
                seen.setdefault(c.name, time.monotonic())
                if len(seen) >= want:
                    stop.set()

        self.watch(stop, on_change)
        return seen

    def published(self, driver: str, label: str) -> dict[str, dict[str, int]]:
        """Mode dra's resources as kube-scheduler sees them: node -> resource name (the
        slices' `label`) -> devices, over the complete newest generation of each pool."""
        dra = client.ResourceV1Api(self.core.api_client)
        pools: dict[str, list[Any]] = {}
        for item in dra.list_resource_slice(field_selector=f"spec.driver={driver}").items:
            pools.setdefault(item.spec.pool.name, []).append(item)
        out: dict[str, dict[str, int]] = {}
        for slices in pools.values():
            top = max(s.spec.pool.generation for s in slices)
            current = [s for s in slices if s.spec.pool.generation == top]
            if len(current) < current[0].spec.pool.resource_slice_count:
                continue  # incomplete: kube-scheduler does not use it yet
            first = current[0]
            name = (first.metadata.labels or {}).get(label, "")
            node = out.setdefault(first.spec.node_name, {})
            node[name] = node.get(name, 0) + sum(len(s.spec.devices or []) for s in current)
        return out

    def node_resources(self, node: str, prefix: str) -> dict[str, dict[str, str]]:
        """The node's capacity and allocatable entries whose names start with `prefix`."""
        status = self.core.read_node_status(node).status
        return {
            field: {k: v for k, v in (getattr(status, field) or {}).items() if k.startswith(prefix)}
            for field in ("capacity", "allocatable")
        }
