#!/usr/bin/env python3
"""What a node watch event costs the cluster view, a heartbeat against a change.

Fills a ledger with `--nodes` kwok-like nodes (2 KB of JSON each, as kwok's watch events
carry them) through extender.cluster.view.ClusterView, then feeds it MODIFIED events the
way the informer does (decode the event, decode the node, hand it to the view), in
interleaved rounds: heartbeats (a new resourceVersion and heartbeat time, nothing the view
reads) and changes (a label that differs each time, so every event is a full look). Prints
microseconds per event, median [min-max] over the rounds, and the ratio of the two in each
round. No cluster, no I/O: the view's own CPU per event.

    .venv/bin/python hack/node-event-cost.py [--nodes 5000] [--events 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import msgspec

from extender.cluster.view import ClusterView
from extender.core.events import PodEvents
from extender.core.ledger import Ledger
from extender.core.objects import Node
from extender.core.pod import Keys
from extender.kube.informer import _Event
from extender.metrics import Metrics

KEYS = Keys.for_domain("escher.io")


def node(i: int, version: int, rack: str) -> dict[str, Any]:
    stamp = f"2026-11-27T00:{version // 60 % 60:02d}:{version % 60:02d}Z"
    condition = {"status": "False", "lastHeartbeatTime": stamp, "reason": "KubeletHasSufficient"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"node-{i}",
            "resourceVersion": str(version),
            "labels": {
                "kubernetes.io/hostname": f"node-{i}",
                "kubernetes.io/os": "linux",
                "type": "kwok",
                "topology.kubernetes.io/zone": f"z{i % 4}",
                "example.com/rack": rack,
            },
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {
            "taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]
        },
        "status": {
            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110", "escher.io/fo": "1"},
            "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110", "escher.io/fo": "1"},
            "conditions": [
                {"type": t, **condition} for t in ("MemoryPressure", "DiskPressure", "PIDPressure")
            ]
            + [{"type": "Ready", "status": "True", "lastHeartbeatTime": stamp}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "nodeInfo": {"kubeletVersion": "kwok", "operatingSystem": "linux"},
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    a = parser.parse_args()
    ledger = Ledger("escher.io")
    seen = []
    view = ClusterView(
        None,  # type: ignore[arg-type]  # the view's handlers make no call
        ledger,
        KEYS,
        PodEvents(),
        Metrics(),
        lambda: False,
        lambda name, version, capacity, shown: seen.append(version),
    )
    events = msgspec.json.Decoder(_Event)
    nodes = msgspec.json.Decoder(Node)
    for i in range(a.nodes):
        view._node("ADDED", nodes.decode(msgspec.json.encode(node(i, 1, "r0"))))
    view._building = False
    for i in range(a.nodes):  # leading now: the first look of each node after the build
        view._node("MODIFIED", nodes.decode(msgspec.json.encode(node(i, 2, "r0"))))

    # Heartbeats go to the first half of the nodes, changes to the other half: a node's
    # event is a change only against the one before it of the same node.
    half = a.nodes // 2

    def lines(first: int, rack: Any) -> list[bytes]:
        return [
            msgspec.json.encode(
                {"type": "MODIFIED", "object": node(first + k % half, 3 + k, rack(k))}
            )
            for k in range(a.events)
        ]

    kinds = {
        "heartbeat": lines(0, lambda k: "r0"),
        "change": lines(half, lambda k: f"c{k // half}"),  # a new rack at each visit
    }
    took: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(a.rounds):
        for kind, batch in kinds.items():
            start = time.perf_counter()
            for line in batch:
                view._node("MODIFIED", nodes.decode(events.decode(line).object))
            took[kind].append((time.perf_counter() - start) / len(batch) * 1e6)
    size = len(kinds["change"][0])
    print(f"{a.nodes} nodes, {a.events} events a kind, {a.rounds} rounds, {size} B an event")
    for kind, us in took.items():
        print(f"{kind:>9}: {statistics.median(us):6.1f} us/event [{min(us):.1f}-{max(us):.1f}]")
    ratios = [h / c for h, c in zip(took["heartbeat"], took["change"], strict=True)]
    print(f"heartbeat / change per round: {', '.join(f'{r:.2f}' for r in ratios)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
