#!/usr/bin/env python3
"""What a plain pod's watch events cost the extender, and which part costs what.

A plain pod (cpu and memory only) goes through no exchange with the extender, yet its pod
watch still carries each of its changes: created, bound, started (kwok's status), deleted.
Builds a standalone service (extender.service.Service: the gang manager, its gate, the
filtered-pod memory and the PodGroup declarations subscribed to the pod events, as in the
real service) and a cluster view over its ledger with `--nodes` nodes, then feeds it
`--pods` pods' four events the way the informer does, from JSON lines shaped like the API
server's (managed fields included). Prints microseconds per event, median [min-max] over
`--rounds`: the whole path, and its parts (decoding the event and the pod, the pod's
PodInfo, the view's handler with the subscribers). No cluster, no I/O: the service's own
CPU per event.

    .venv/bin/python hack/pod-event-cost.py [--nodes 5000] [--pods 5000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import msgspec

from extender.cluster.view import ClusterView
from extender.core.objects import Pod
from extender.core.pod import pod_info
from extender.kube.informer import _Event
from extender.service import Service
from extender.settings import Settings


def managed(manager: str, operation: str) -> dict[str, Any]:
    """A managedFields entry as the API server keeps one: most of a pod event's bytes."""
    fields = {
        "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
        "f:spec": {
            "f:containers": {
                'k:{"name":"main"}': {
                    ".": {},
                    "f:image": {},
                    "f:imagePullPolicy": {},
                    "f:name": {},
                    "f:resources": {".": {}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
                    "f:terminationMessagePath": {},
                    "f:terminationMessagePolicy": {},
                }
            },
            "f:dnsPolicy": {},
            "f:enableServiceLinks": {},
            "f:restartPolicy": {},
            "f:schedulerName": {},
            "f:securityContext": {},
            "f:terminationGracePeriodSeconds": {},
            "f:tolerations": {},
        },
    }
    return {
        "manager": manager,
        "operation": operation,
        "apiVersion": "v1",
        "time": "2026-11-27T08:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }


def pod(i: int, version: int, node: str, phase: str) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "qosClass": "Burstable"}
    if node:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-27T08:00:00Z"}
        ]
    if phase == "Running":
        status["conditions"] += [
            {"type": t, "status": "True", "lastTransitionTime": "2026-11-27T08:00:01Z"}
            for t in ("Initialized", "Ready", "ContainersReady")
        ]
        status.update(hostIP="10.0.0.1", podIP=f"10.1.{i // 250}.{i % 250}")
        status["containerStatuses"] = [
            {
                "name": "main",
                "ready": True,
                "restartCount": 0,
                "image": "fake",
                "imageID": "",
                "started": True,
                "state": {"running": {"startedAt": "2026-11-27T08:00:01Z"}},
            }
        ]
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "fake",
                "imagePullPolicy": "IfNotPresent",
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
            }
        ],
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": True,
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "terminationGracePeriodSeconds": 30,
        "priority": 0,
        "tolerations": [
            {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"},
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
    }
    if node:
        spec["nodeName"] = node
    fields = [managed("bench", "Update")]
    if node:
        fields.append(managed("kube-scheduler", "Update"))
    if phase == "Running":
        fields.append(managed("kwok", "Update"))
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": f"plain-{i}",
            "namespace": "default",
            "uid": f"00000000-0000-0000-0000-{i:012d}",
            "resourceVersion": str(version),
            "creationTimestamp": "2026-11-27T08:00:00Z",
            "labels": {"app": "bench"},
            "managedFields": fields,
        },
        "spec": spec,
        "status": status,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    a = parser.parse_args()
    service = Service(Settings(mode="standalone"))
    view = ClusterView(
        None,  # type: ignore[arg-type]  # the view's handlers make no call
        service.ledger,
        service.keys,
        service.events,
        service.metrics,
        lambda: False,
    )
    for n in range(a.nodes):
        service.ledger.upsert_node(
            f"node-{n}", {}, {"cpu": 32, "memory": 256 << 30, "pods": 110}, None, (), False
        )
    view._building = False

    def lines(i: int) -> list[bytes]:
        node = f"node-{i % a.nodes}"
        return [
            msgspec.json.encode({"type": kind, "object": pod(i, v, where, phase)})
            for v, (kind, where, phase) in enumerate(
                [
                    ("ADDED", "", "Pending"),
                    ("MODIFIED", node, "Pending"),
                    ("MODIFIED", node, "Running"),
                    ("DELETED", node, "Running"),
                ],
                start=10,
            )
        ]

    batches = [lines(i) for i in range(a.pods)]
    events, pods = msgspec.json.Decoder(_Event), msgspec.json.Decoder(Pod)
    keys, prefix = service.keys, service.ledger.prefix
    decoded = [[(e.type, pods.decode(e.object)) for e in map(events.decode, b)] for b in batches]

    def whole() -> None:
        for batch in batches:
            for line in batch:
                event = events.decode(line)
                view._pod(event.type, pods.decode(event.object))

    def decode() -> None:
        for batch in batches:
            for line in batch:
                pods.decode(events.decode(line).object)

    def info() -> None:
        for batch in decoded:
            for _, p in batch:
                pod_info(p, keys, prefix)

    def handler() -> None:
        for batch in decoded:
            for kind, p in batch:
                view._pod(kind, p)

    parts: dict[str, Callable[[], None]] = {
        "whole path": whole,
        "decoding": decode,
        "pod_info": info,
        "view + subscribers": handler,
    }
    took: dict[str, list[float]] = {k: [] for k in parts}
    count = sum(len(b) for b in batches)
    for _ in range(a.rounds):
        for part, run in parts.items():
            start = time.perf_counter()
            run()
            took[part].append((time.perf_counter() - start) / count * 1e6)
    size = statistics.mean(len(line) for b in batches for line in b)
    print(f"{a.nodes} nodes, {a.pods} pods x 4 events, {a.rounds} rounds, {size:.0f} B an event")
    for part, us in took.items():
        print(f"{part:>20}: {statistics.median(us):6.1f} us/event [{min(us):.1f}-{max(us):.1f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
