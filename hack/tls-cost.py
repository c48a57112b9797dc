#!/usr/bin/env python3
"""What mutual TLS on the verbs costs a filter call, measured as kube-scheduler pays it.

Starts the extender standalone (`serve --mode standalone`) twice on loopback: once plain HTTP, once
with the verbs on their own mutual-TLS listener (`--verbs-port`, `--verbs-client-ca-file`) as
deploy/ runs it, which speaks HTTP/2 (as kube-scheduler asks) and HTTP/1.1. Then sends
filter calls (1,000 NodeNames, one ephemeral unit asked) over a kept-alive connection, as
kube-scheduler's Go client does, in interleaved rounds, and prints per setup the client
round trip p50/p99, the extender's CPU per call (from /proc: the server's side alone, where
the round trip also counts httpx's pure-Python HTTP/2), their ratios, and the cost of a new
connection (the handshake: paid once per kept-alive connection, and over HTTP/1.1 by each
gang member held at bind past the second). TokenReview is not on this path: the verbs
authenticate by certificate, and only the policy API asks the API server.

    .venv/bin/python hack/tls-cost.py [--calls 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from escher_harness.bench.latency import args as filter_args
from escher_harness.bench.latency import round_trips as timed
from escher_harness.localcluster.pki import make_pki
from escher_harness.localcluster.ports import allocate_ports


def serve(*argv: str) -> subprocess.Popen[bytes]:
    argv = ("--mode", "standalone", *argv)
    return subprocess.Popen([sys.executable, "-m", "extender", "serve", *argv],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def wait(url: str, **kw: object) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/readyz", timeout=1, **kw)  # type: ignore[arg-type]
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not come up")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100)[98]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    opts = p.parse_args()
    body = json.dumps(filter_args(1000)).encode()
    with tempfile.TemporaryDirectory() as tmp:
        pki = make_pki(Path(tmp))
        ports = allocate_ports({"plain": None, "api": None, "verbs": None})
        mtls = ["--port", str(ports["api"]), "--verbs-port", str(ports["verbs"]),
                "--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key),
                "--verbs-client-ca-file", str(pki.ca), "--token", "t"]  # fmt: skip
        procs = [serve("--port", str(ports["plain"]), "--token", "t"), serve(*mtls)]
        ctx = ssl.create_default_context(cafile=str(pki.ca))
        ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
        verbs = f"https://127.0.0.1:{ports['verbs']}"
        setups: dict[str, dict[str, Any]] = {
            "plain HTTP": {"base_url": f"http://127.0.0.1:{ports['plain']}"},
            "mutual TLS": {"base_url": verbs, "verify": ctx},
            "mutual TLS, HTTP/2": {"base_url": verbs, "verify": ctx, "http2": True},
        }
        pids = {"plain HTTP": procs[0].pid}
        pids["mutual TLS"] = pids["mutual TLS, HTTP/2"] = procs[1].pid
        try:
            wait(setups["plain HTTP"]["base_url"])
            wait(f"https://127.0.0.1:{ports['api']}", verify=ssl.create_default_context(
                cafile=str(pki.ca)))  # fmt: skip
            kept: dict[str, list[float]] = {k: [] for k in setups}
            cpu: dict[str, list[float]] = {k: [] for k in setups}
            fresh: dict[str, list[float]] = {k: [] for k in setups}
            for rnd in range(opts.rounds):
                for name, kw in setups.items():
                    with httpx.Client(timeout=30, **kw) as client:
                        timed(client, body, 50)  # warm the connection and the paths
                        before = cpu_seconds(pids[name])
                        kept[name] += timed(client, body, opts.calls)
                        used = cpu_seconds(pids[name]) - before
                        cpu[name].append(used / opts.calls * 1000)
                    for _ in range(50):  # a new connection per call: the handshake
                        with httpx.Client(timeout=30, **kw) as client:
                            fresh[name] += timed(client, body, 1)
                print(f"round {rnd + 1}/{opts.rounds} done", file=sys.stderr)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(10)
    print("| setup | kept-alive p50 ms | p99 ms | extender CPU ms a call, per round "
          "| new connection p50 ms |")  # fmt: skip
    print("|---|---|---|---|---|")
    for name in setups:
        rounds = ", ".join(f"{x:.2f}" for x in cpu[name])
        print(f"| {name} | {statistics.median(kept[name]):.2f} | {p99(kept[name]):.2f} "
              f"| {rounds} | {statistics.median(fresh[name]):.2f} |")  # fmt: skip
    for name in ("mutual TLS", "mutual TLS, HTTP/2"):
        ratio = statistics.median(kept[name]) / statistics.median(kept["plain HTTP"])
        share = statistics.median(cpu[name]) / statistics.median(cpu["plain HTTP"])
        print(f"{name} / plain: kept-alive p50 {ratio:.2f}, extender CPU a call {share:.2f}")


if __name__ == "__main__":
    main()
