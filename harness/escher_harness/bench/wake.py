"""set_resource-to-schedulable latency: how long after a resource is set through the policy API
pods that were waiting for it are bound. Part of `bench extender` (on by default, `--wake-trials
0` turns it off), in the modes with a policy API (pure, extender, extender-split, dra).

Each trial, on the throughput run's cluster once its workloads are done, kube-scheduler running:

1. creates `pods` pods each requesting one unit of a resource that does not exist yet (a new
   name per trial), and waits until kube-scheduler has found every one unschedulable, then a
   little longer (so none is still in its first backoff: the resource's arrival must be what
   wakes them);
2. calls `PolicyClient.set_resource` for the resource on every node (one unit more per node
   than an even spread needs, as the throughput workloads do) and records, from the moment
   of the call (time.monotonic), the first and the last pod seen bound by a pod watch, and
   how long the call itself took;
3. deletes the pods and the resource and waits for the service's writes to settle.

Per mode the trials give the median and spread of first and all (escher_harness.bench
.extender_summary.wake_table). What the figure holds differs by mode, which is the point: pure
and extender write the resource into every node's status (a Node event wakes the pods in
kube-scheduler's queue), dra publishes a DeviceClass and a ResourceSlice per node (DRA events
wake them). Called by escher_harness.bench.throughput.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from kubernetes import client

from escher_harness import localcluster
from escher_harness.workload import Workload, pod_manifest
from extender.esl.client import PolicyClient

LABEL: Final = "bench.escher.io/run"
RUN: Final = "wake"
# After every pod is found unschedulable: longer than kube-scheduler's first backoff (1 s).
SETTLE: Final = 2.0
BOUND_TIMEOUT: Final = 120.0


def run(
    info: localcluster.ClusterInfo,
    api: client.ApiClient,
    trials: int,
    pods: int,
    progress: Callable[[str], None],
    idle: Callable[[localcluster.ClusterInfo], None],
) -> list[dict[str, Any]]:
    """`trials` trials of `pods` pods each; one dict per trial (seconds, None if not all bound
    within BOUND_TIMEOUT). `idle` waits until the service has nothing left to write."""
    assert info.extender_url is not None, "the wake trials need the policy API"
    out = []
    with PolicyClient(info.extender_url, info.token, timeout=120) as policy:
        for k in range(trials):
            out.append(_trial(info, api, policy, k, pods))
            idle(info)
            t = out[-1]
            progress(
                f"wake {k + 1}/{trials}: first bound {t['first_s']}s, all "
                f"{t['all_s']}s after set_resource (the call took {t['set_call_s']}s)"
            )
    return out


def _trial(
    info: localcluster.ClusterInfo, api: client.ApiClient, policy: PolicyClient, k: int, pods: int
) -> dict[str, Any]:
    name = f"wake{k}-{int(time.time() * 1000) % 1_000_000}"
    resource = f"{info.resource_domain}/{name}"
    work = Workload(api)
    names = [f"wake-{k}-{i}" for i in range(pods)]
    for n in names:
        work.create(
            pod_manifest(
                n,
                limits={resource: "1"},
                requests={"cpu": "100m", "memory": "64Mi"},
                labels={LABEL: RUN},
            )
        )
    try:
        _wait_unschedulable(work, names, timeout=60.0)
        time.sleep(SETTLE)
        stop = threading.Event()
        found: dict[str, dict[str, float]] = {}
        watcher = threading.Thread(
            target=lambda: found.setdefault("bound", work.watch_bound(pods, stop)), daemon=True
        )
        watcher.start()
        time.sleep(0.5)  # the watch is established before the resource exists
        per_node = math.ceil(pods / len(info.nodes)) + 1
        t0 = time.monotonic()
        policy.set_resource(name, per_node)
        call = time.monotonic() - t0
        watcher.join(timeout=BOUND_TIMEOUT)
        stop.set()
        watcher.join()
        bound = sorted(found.get("bound", {}).values())
        return {
            "pods": pods,
            "bound": len(bound),
            "set_call_s": round(call, 3),
            "first_s": round(bound[0] - t0, 3) if bound else None,
            "all_s": round(bound[-1] - t0, 3) if len(bound) == pods else None,
        }
    finally:
        _delete(api)
        policy.delete_resource(name, force=True)


def _wait_unschedulable(work: Workload, names: list[str], timeout: float) -> None:
    """Until kube-scheduler has tried every pod and found it unschedulable."""
    deadline = time.monotonic() + timeout
    while True:
        placed = work.placements(names)
        if len(placed) == len(names) and all(p.reason and not p.node for p in placed.values()):
            return
        if any(p.node for p in placed.values()):
            raise RuntimeError(
                f"a pod asking for a resource that does not exist was bound: {placed}"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(f"the wake pods were not all found unschedulable in {timeout:g}s")
        time.sleep(0.2)


def _delete(api: client.ApiClient) -> None:
    Workload(api).delete_labelled(f"{LABEL}={RUN}")
