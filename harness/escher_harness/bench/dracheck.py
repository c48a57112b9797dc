"""Mode dra's over-commit check: no node holds more claimed devices of a resource than it has
published, and no device is held twice.

In mode dra the ephemeral resources are not in the nodes' allocatable (the Node status check of
escher_harness.bench.throughput cannot see them): the service publishes each node's capacity as
devices in ResourceSlices of its driver (pool `<node>/<name>/<i>`, labelled with the resource's
short name), and kube-scheduler allocates one device per requested unit in a ResourceClaim per
pod. Read from the API as kube-scheduler reads it: a pool counts in its newest generation, and
only once that generation is complete (escher_harness.workload.Workload.published does the same).
`over_capacity` is pure (tested in tests/unit); `read` lists the objects.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client


def read(api: client.ApiClient, driver: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The driver's ResourceSlices and every ResourceClaim, as JSON."""
    resource = client.ResourceV1Api(api)

    def items(raw: Any) -> list[dict[str, Any]]:
        return list(json.loads(raw.data).get("items") or [])

    return (
        items(
            resource.list_resource_slice(
                field_selector=f"spec.driver={driver}", _preload_content=False
            )
        ),
        items(resource.list_resource_claim_for_all_namespaces(_preload_content=False)),
    )


def published(
    slices: Sequence[Mapping[str, Any]], label: str
) -> dict[str, tuple[str, str, frozenset[str]]]:
    """pool -> (node, resource, its devices) over each pool's complete newest generation."""
    pools: dict[str, list[Mapping[str, Any]]] = {}
    for s in slices:
        pools.setdefault(s["spec"]["pool"]["name"], []).append(s)
    out = {}
    for pool, mine in pools.items():
        top = max(s["spec"]["pool"]["generation"] for s in mine)
        current = [s for s in mine if s["spec"]["pool"]["generation"] == top]
        if len(current) < current[0]["spec"]["pool"].get("resourceSliceCount", 1):
            continue  # incomplete: kube-scheduler does not use it yet
        first = current[0]
        resource = (first["metadata"].get("labels") or {}).get(label, "")
        devices = frozenset(d["name"] for s in current for d in s["spec"].get("devices") or [])
        out[pool] = (first["spec"].get("nodeName") or "", resource, devices)
    return out


def claimed(claims: Sequence[Mapping[str, Any]], driver: str) -> Counter[tuple[str, str]]:
    """(pool, device) -> how many allocated claims hold it (the driver's devices only)."""
    held: Counter[tuple[str, str]] = Counter()
    for c in claims:
        allocation = (c.get("status") or {}).get("allocation") or {}
        for r in (allocation.get("devices") or {}).get("results") or []:
            if r.get("driver") == driver:
                held[(r["pool"], r["device"])] += 1
    return held


def over_capacity(
    slices: Sequence[Mapping[str, Any]],
    claims: Sequence[Mapping[str, Any]],
    driver: str,
    label: str,
) -> list[str]:
    """What is over-committed, one line each (empty: nothing): a node and resource with more
    devices claimed than published, a device claimed twice, a claimed device no pool of the
    node publishes."""
    pools = published(slices, label)
    held = claimed(claims, driver)
    capacity: Counter[tuple[str, str]] = Counter()
    for node, resource, devices in pools.values():
        capacity[(node, resource)] += len(devices)
    taken: Counter[tuple[str, str]] = Counter()
    problems = []
    for (pool, device), n in sorted(held.items()):
        if n > 1:
            problems.append(f"device {pool}/{device} held by {n} claims")
        seen = pools.get(pool)
        if seen is None or device not in seen[2]:
            problems.append(f"device {pool}/{device} is claimed but not published")
            continue
        taken[(seen[0], seen[1])] += n
    for (node, resource), n in sorted(taken.items()):
        if n > capacity[(node, resource)]:
            problems.append(
                f"{node}: {n} devices of {resource} claimed, {capacity[(node, resource)]} published"
            )
    return problems
