#!/usr/bin/env python3
"""What leader election costs a filter call, measured as kube-scheduler pays it.

Starts two embedded clusters side by side (the same node count, kwok off): one with a lone
extender (no leader election), one with `--replicas 2` (Lease-based leader election, the
followers' warm ledgers fed by the same watches). Then sends filter calls (the nodes' names,
one ephemeral unit asked) to the lone extender and to the leader replica directly (not through
the service proxy, whose hop is not leader election's cost), on their mutual-TLS verbs
listeners as kube-scheduler calls them, over a kept-alive connection, in interleaved rounds,
and prints the client round trip p50/p99 per setup and their ratio.

    .venv/bin/python hack/leader-cost.py [--nodes 1000] [--calls 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from escher_harness import localcluster
from escher_harness.bench.latency import args as filter_args
from escher_harness.bench.latency import round_trips as timed


def verbs_url(info: localcluster.ClusterInfo) -> str:
    """The verbs' mutual-TLS listener of the lone extender, or of the replica that leads (its
    own, not the service proxy's)."""
    if not info.replica_urls:
        return f"https://127.0.0.1:{info.ports['verbs']}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for name, url in localcluster.load(info.dir).replica_urls.items():
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    index = name.rsplit("-", 1)[1]
                    return f"https://127.0.0.1:{info.ports[f'verbs-{index}']}"
            except httpx.HTTPError:
                pass
        time.sleep(0.1)
    raise SystemExit("no replica became the leader within 60 s")


def tls(info: localcluster.ClusterInfo) -> ssl.SSLContext:
    """kube-scheduler's side of the verbs' mutual TLS."""
    certs = info.paths["cert_dir"] / "extender"
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    ctx.load_cert_chain(str(certs / "client.crt"), str(certs / "client.key"))
    return ctx


def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100)[98]


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    opts = p.parse_args()
    body = json.dumps(filter_args(opts.nodes)).encode()
    with tempfile.TemporaryDirectory(prefix="escher-leader-cost-") as tmp:
        infos: dict[str, localcluster.ClusterInfo] = {}
        try:
            for name, replicas in (("lone extender", 1), ("leader of 2 replicas", 2)):
                spec = localcluster.ClusterSpec(
                    dir=Path(tmp) / str(replicas),
                    nodes=opts.nodes,
                    mode="extender",
                    kwok=False,
                    replicas=replicas,
                )
                print(f"starting: {name}, {opts.nodes} nodes", file=sys.stderr, flush=True)
                infos[name] = localcluster.up(spec)
            urls = {name: verbs_url(info) for name, info in infos.items()}
            times: dict[str, list[float]] = {k: [] for k in urls}
            for rnd in range(opts.rounds):
                for name, url in urls.items():
                    with httpx.Client(base_url=url, verify=tls(infos[name]), timeout=30) as client:
                        timed(client, body, 50)  # warm the connection and the paths
                        times[name] += timed(client, body, opts.calls)
                print(f"round {rnd + 1}/{opts.rounds} done", file=sys.stderr, flush=True)
        finally:
            for info in infos.values():
                localcluster.down(info.dir)
    print(f"filter, {opts.nodes} NodeNames, {opts.calls} calls x {opts.rounds} rounds")
    print("| setup | kept-alive p50 ms | p99 ms |")
    print("|---|---|---|")
    for name, xs in times.items():
        print(f"| {name} | {statistics.median(xs):.2f} | {p99(xs):.2f} |")
    lone, led = times["lone extender"], times["leader of 2 replicas"]
    print(f"leader / lone, p50: {statistics.median(led) / statistics.median(lone):.2f}")


if __name__ == "__main__":
    main()
