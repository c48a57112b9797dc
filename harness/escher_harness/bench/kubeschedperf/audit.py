"""kube-apiserver's audit log read as kube-scheduling-perf reads it, and the figures from it.

As the project's hack/save-scheduler-result.sh: events at stage ResponseComplete of verb
create on pods in the run's namespace, answered 2xx; a pod is *created* at its create's
stageTimestamp and *scheduled* at its pods/binding create's. Created-to-scheduled is the
difference per pod; the binding window is the last binding less the first. Beside that,
what the project does not read but this benchmark reports: the time from the first pod
created to the last scheduled, the node each Binding named and when pods finished
(kwok's status patch to Succeeded), to find nodes over capacity, and gangs ever partly bound
past their bind burst. Read by escher_harness.bench.kubeschedperf.run, and by the unit and
end-to-end tests.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from escher_harness.bench.stats import summary

# Two bindings of one gang further apart than this are not one bind burst: something
# waited between them (a Binding is one pod per call, issued back to back).
BURST_GAP_SECONDS = 1.0


@dataclass
class PodTimes:
    """Per pod (by name): when created, when bound and to which node, when it finished."""

    created: dict[str, float] = field(default_factory=dict)
    bound: dict[str, tuple[float, str]] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)


def timestamp(text: str) -> float:
    """An audit event's RFC 3339 time (microseconds, Z) as seconds since the epoch."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def read(lines: Iterable[str], namespace: str = "default") -> PodTimes:
    """The pods' times from audit log lines (JSON, one event a line); others are skipped."""
    times = PodTimes()
    for line in lines:
        if '"pods"' not in line or '"ResponseComplete"' not in line:
            continue  # cheap: most lines are other resources' metadata
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        code = (event.get("responseStatus") or {}).get("code") or 0
        if ref.get("resource") != "pods" or ref.get("namespace") != namespace:
            continue
        if event.get("stage") != "ResponseComplete" or not 200 <= code < 300:
            continue
        _note(times, event, ref)
    return times


def _note(times: PodTimes, event: Mapping[str, Any], ref: Mapping[str, Any]) -> None:
    name, sub, verb = ref.get("name") or "", ref.get("subresource") or "", event.get("verb")
    at = timestamp(event["stageTimestamp"])
    if verb == "create" and not sub:
        # A pod created with generateName is named in the response only.
        name = name or ((event.get("responseObject") or {}).get("metadata") or {}).get("name", "")
        times.created.setdefault(name, at)
    elif verb == "create" and sub == "binding":
        target = ((event.get("requestObject") or {}).get("target") or {}).get("name", "")
        times.bound.setdefault(name, (at, target))
    elif sub == "status" and verb in ("patch", "update"):
        status = (event.get("requestObject") or {}).get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            times.finished.setdefault(name, at)


def read_file(path: Path, namespace: str = "default") -> PodTimes:
    with path.open() as f:
        return read(f, namespace)


def count_bindings(text: str) -> int:
    """Pods bound in a stretch of the log: successful pods/binding creates (for progress)."""
    return sum(
        1
        for line in text.splitlines()
        if '"subresource":"binding"' in line and '"code":201' in line and '"create"' in line
    )


def job_of(pod: str) -> str:
    """The job (and gang) of a pod named `<job>-<index>`."""
    return pod.rpartition("-")[0]


def partly_bound_gangs(times: PodTimes, sizes: Mapping[str, int]) -> list[str]:
    """Gangs (job name -> size) ever partly bound past their bind burst: left with some but
    not all members bound, or with two successive bindings more than BURST_GAP_SECONDS
    apart (members bound while the rest waited)."""
    binds: dict[str, list[float]] = {}
    for pod, (t, _) in times.bound.items():
        binds.setdefault(job_of(pod), []).append(t)
    out = []
    for gang, size in sorted(sizes.items()):
        at = sorted(binds.get(gang, ()))
        if not at:
            continue
        gaps = (b - a for a, b in itertools.pairwise(at))
        if len(at) < size or any(g > BURST_GAP_SECONDS for g in gaps):
            out.append(gang)
    return out


def over_capacity(times: PodTimes, room: int) -> dict[str, int]:
    """Nodes that at some instant held more than `room` of the run's pods (all alike in
    shape), with the most they held: bindings add one, finished pods take one away."""
    steps: list[tuple[float, int, str]] = []
    for pod, (at, node) in times.bound.items():
        steps.append((at, 1, node))
        if pod in times.finished:
            steps.append((times.finished[pod], -1, node))
    held: dict[str, int] = {}
    peak: dict[str, int] = {}
    for _, step, node in sorted(steps, key=lambda s: (s[0], s[1])):  # frees first on a tie
        held[node] = held.get(node, 0) + step
        if held[node] > room:
            peak[node] = max(peak.get(node, 0), held[node])
    return peak


def figures(times: PodTimes, pods: int) -> dict[str, Any]:
    """One run's figures from its pods' times; `pods` is how many the run created."""
    paired = [b[0] - c for b, c in _pairs(times).values()]
    # A create's ResponseComplete can be stamped after the pod's binding (kube-scheduler saw
    # it by watch while the create's answer was still being written): scheduled at once.
    latencies = sorted(max(0.0, v) for v in paired)
    created = sorted(times.created.values())
    bound = sorted(b for b, _ in times.bound.values())
    out: dict[str, Any] = {
        "pods": pods,
        "created": len(created),
        "scheduled": len(latencies),
        "creation_s": round(created[-1] - created[0], 3) if created else None,
        "to_last_scheduled_s": None,
        "binding_window_s": round(bound[-1] - bound[0], 3) if len(bound) > 1 else None,
        "latency_s": summary(latencies) if latencies else None,
        "bound_before_create_answered": sum(1 for v in paired if v < 0),
    }
    if created and len(latencies) == pods:
        out["to_last_scheduled_s"] = round(bound[-1] - created[0], 3)
    return out


def _pairs(times: PodTimes) -> dict[str, tuple[tuple[float, str], float]]:
    return {p: (b, times.created[p]) for p, b in times.bound.items() if p in times.created}


def series(times: PodTimes, start: float) -> dict[str, Sequence[float]]:
    """Seconds since `start` at which each pod was created and scheduled, sorted (the
    curves of scheduled pods over time), and each pod's created-to-scheduled, sorted."""
    return {
        "created": [round(t - start, 3) for t in sorted(times.created.values())],
        "scheduled": [round(b - start, 3) for b, _ in sorted(times.bound.values())],
        "latencies": sorted(round(max(0.0, b[0] - c), 3) for b, c in _pairs(times).values()),
    }
