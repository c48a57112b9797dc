#!/usr/bin/env python3
"""Large gangs created at once, as kube-scheduling-perf's gang scenarios create them: the
extender's time from the first member created to the last bound, for iterating on the
service (issue 61). Not kube-scheduling-perf itself (`escher-extender bench scheduling-perf`
runs its matrix): one approach, the extender as deploy/ ships it (split layout, the adaptive
gang gate), one shape per run.

Starts the embedded cluster (`--nodes` kwok nodes of 32 cpu / 128Gi, kube-scheduler and the
extender with a client budget of 1,000 qps as the gang benchmark gives them), creates
`--gangs` gangs of `--size` members (100m cpu, 64Mi; label `escher.io/gang`, annotation
`escher.io/gang-min` = size, the default reservation timeout) from `--threads` client
threads, all gangs' members interleaved in one stream, and watches every pod until all are
bound or `--deadline` passes. Prints, for the run: creation (first to last create call),
created-to-last-bound, per gang the bind burst (its first member seen bound to its last)
as the largest over gangs, and any gang seen partly bound when the run ended; whether any
node held more than its cpu or pods (from the watch: the bound pods' requests per node);
the extender's CPU seconds and peak resident memory, and the longest event-loop turn its
loop watch logged (extender.loopwatch: turns over 100 ms). Then stops the cluster.

    .venv/bin/python hack/gang-at-scale.py --nodes 1000 --gangs 1 --size 10000
    .venv/bin/python hack/gang-at-scale.py --nodes 1000 --gangs 500 --size 20
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import tempfile
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.request import urlopen

from kubernetes import client, watch
from urllib3.exceptions import ProtocolError

from escher_harness import localcluster
from escher_harness.bench.kubeschedperf.submit import Bucket
from escher_harness.kubeclient import api_client
from escher_harness.localcluster.processes import cpu_seconds
from escher_harness.workload import pod_manifest

NODE_CPU_MILLI, NODE_PODS = 32_000, 110
MEMBER_CPU_MILLI = 100


def create_all(
    api: client.ApiClient, gangs: int, size: int, threads: int, rate: float
) -> dict[str, float]:
    """Every member, gangs interleaved, from `threads` threads, at most `rate` a second (0:
    as fast as the API server answers): name -> when its create call returned (a call the
    API server refused for load is retried)."""
    bucket = Bucket(rate, 1) if rate > 0 else None
    names = [(f"g{g:04d}", f"g{g:04d}-{i}") for i in range(size) for g in range(gangs)]
    created: dict[str, float] = {}

    def create(item: tuple[str, str]) -> None:
        gang, name = item
        body = pod_manifest(
            name,
            requests={"cpu": f"{MEMBER_CPU_MILLI}m", "memory": "64Mi"},
            labels={"escher.io/gang": gang},
            annotations={"escher.io/gang-min": str(size)},
        )
        core = client.CoreV1Api(api)
        if bucket is not None:
            bucket.take()
        for _ in range(20):
            try:
                core.create_namespaced_pod("default", body)
                break
            except client.ApiException as e:
                if e.status == 409:  # an earlier try was created after all
                    break
                time.sleep(1)
        created[name] = time.time()

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(create, names))
    return created


class Binds:
    """Every pod's node as the watch first saw it bound (wall clock), in a thread."""

    def __init__(self, api: client.ApiClient) -> None:
        self.bound: dict[str, tuple[float, str]] = {}
        self._core = client.CoreV1Api(api)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for ev in watch.Watch().stream(
                    self._core.list_namespaced_pod, "default", timeout_seconds=30
                ):
                    pod = ev["object"]
                    if pod.spec.node_name and pod.metadata.name not in self.bound:
                        self.bound[pod.metadata.name] = (time.time(), pod.spec.node_name)
                    if self._stop.is_set():
                        break
            except (client.ApiException, ProtocolError):
                # a loaded API server's 504 on the relist, or the stream cut: list again
                time.sleep(1)

    def close(self) -> None:
        self._stop.set()


def report(
    created: dict[str, float], bound: dict[str, tuple[float, str]], gangs: int, size: int
) -> dict[str, Any]:
    first = min(created.values())
    per_gang: dict[str, list[float]] = defaultdict(list)
    per_node: dict[str, int] = defaultdict(int)
    for name, (t, node) in bound.items():
        per_gang[name.rsplit("-", 1)[0]].append(t)
        per_node[node] += 1
    bursts = [max(ts) - min(ts) for ts in per_gang.values() if len(ts) == size]
    over = [
        n for n, k in per_node.items() if k > NODE_PODS or k * MEMBER_CPU_MILLI > NODE_CPU_MILLI
    ]
    return {
        "created_s": round(max(created.values()) - first, 1),
        "bound": f"{len(bound)}/{gangs * size}",
        "created_to_last_bound_s": (
            round(max(t for t, _ in bound.values()) - first, 1) if bound else None
        ),
        "gangs_complete": f"{len(bursts)}/{gangs}",
        "gangs_partly_bound_at_end": sum(0 < len(ts) < size for ts in per_gang.values()),
        "longest_bind_burst_s": round(max(bursts), 2) if bursts else None,
        "nodes_over_capacity": len(over),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gangs", type=int, default=1)
    ap.add_argument("--size", type=int, default=10_000)
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument(
        "--rate", type=float, default=0, help="pods created a second at most (0: no limit)"
    )
    ap.add_argument("--deadline", type=float, default=600, help="seconds after the first create")
    ap.add_argument("--logs", type=Path, help="copy every process's log here before stopping")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="escher-gang-at-scale-") as tmp:
        spec = localcluster.ClusterSpec(
            dir=Path(tmp) / "c",
            nodes=args.nodes,
            node_cpu="32",
            node_memory="128Gi",
            mode="extender",
            gang_gate=True,
            client_qps=1000.0,
            client_burst=2000,
            timeout=600,
        )
        info = localcluster.up(spec)
        try:
            assert info.extender_url
            api = api_client(info.kubeconfig, pool_size=args.threads)
            extender = next(p for p in info.processes if p.name == "extender")
            cpu0 = cpu_seconds(extender)
            binds = Binds(api)
            created = create_all(api, args.gangs, args.size, args.threads, args.rate)
            want, start = args.gangs * args.size, min(created.values())
            while len(binds.bound) < want and time.time() - start < args.deadline:
                time.sleep(1)
            binds.close()
            out = report(created, binds.bound, args.gangs, args.size)
            out["extender_cpu_s"] = round(cpu_seconds(extender) - cpu0, 1)
            status = Path(f"/proc/{extender.pid}/status").read_text()
            out["extender_peak_rss_mib"] = next(
                int(line.split()[1]) // 1024 for line in status.splitlines() if "VmHWM" in line
            )
            held = [
                json.loads(line).get("held_ms", 0.0)
                for line in extender.log.read_text().splitlines()
                if '"extender.loopwatch"' in line
            ]
            out["loopwatch_longest_ms"] = max(held, default=0.0)
            print(json.dumps(out, indent=1))
        finally:
            if args.logs is not None:
                args.logs.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(OSError, AssertionError):
                    assert info.extender_url
                    url = f"{info.extender_url}/metrics"
                    (args.logs / "extender.metrics").write_bytes(urlopen(url, timeout=10).read())
                for p in info.processes:
                    if p.log.exists():
                        shutil.copy(p.log, args.logs / f"{p.name}.log")
            localcluster.down(info.dir)


if __name__ == "__main__":
    main()
