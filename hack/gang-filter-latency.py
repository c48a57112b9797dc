#!/usr/bin/env python3
"""A gang member's filter at scale: the server-side latency of the call that plans and
reserves a whole gang, the costliest filter the extender answers.

Starts the embedded cluster in extender mode (kwok off, so nothing else runs), then sends
filter calls to the verbs' mutual-TLS listener as kube-scheduler does (a full Pod and every
node's name), each for the first member of a new gang (`--size` members of 100m cpu and
64Mi), so every call plans a place for the whole gang over all nodes and reserves it in the
ledger. Also sends the same gang's member again (the cheap path: its reserved node) and a
plain pod, for comparison. Prints p50/p99 of the Server-Timing durations. The reservations
are never bound: they expire with the extender's unconfirmed-member timeout.

While it runs, two probes run in threads on their own connections: plain pods' filters back
to back (what every other pod's filter costs while gangs are being planned, server side and
round trip) and GET /healthz back to back (its slowest answer bounds the longest event-loop
stall). `--waiting N` first reserves N gangs (held, waiting for members that never come) so
the measured calls plan beside them; the extender's resident memory is read before and
after.

    .venv/bin/python hack/gang-filter-latency.py [--nodes 1000] [--calls 500] [--size 8]
        [--waiting 0]
"""

from __future__ import annotations

import argparse
import copy
import json
import ssl
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from escher_harness import localcluster
from escher_harness.bench.latency import args as filter_args
from escher_harness.bench.stall import Probe
from escher_harness.localcluster.processes import rss_bytes


class FilterProbe:
    """Plain pods' filters back to back in a thread: server-side and round-trip times."""

    def __init__(self, url: str, ctx: ssl.SSLContext, body: dict[str, Any]) -> None:
        self._client = httpx.Client(base_url=url, verify=ctx, timeout=30)
        self._body = body
        self._stop = threading.Event()
        self.server: list[float] = []
        self.trip: list[float] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            start = time.perf_counter()
            ms, _ = timed(self._client, self._body)
            self.trip.append((time.perf_counter() - start) * 1000)
            self.server.append(ms)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._client.close()


def timed(client: httpx.Client, body: dict[str, Any]) -> tuple[float, list[str]]:
    r = client.post(
        "/filter", content=json.dumps(body), headers={"Content-Type": "application/json"}
    )
    r.raise_for_status()
    return float(r.headers["Server-Timing"].split("dur=")[1]), r.json()["NodeNames"] or []


def member(base: dict[str, Any], gang: str, index: int, size: int) -> dict[str, Any]:
    body = copy.deepcopy(base)
    meta = body["Pod"]["metadata"]
    meta.update(
        name=f"{gang}-{index}",
        uid=f"{gang}-{index}-uid",
        labels={"escher.io/gang": gang},
        annotations={"escher.io/gang-min": str(size), "escher.io/gang-timeout": "600"},
    )
    return body


def summary(xs: list[float]) -> str:
    return f"p50 {statistics.median(xs):.2f} ms, p99 {statistics.quantiles(xs, n=100)[98]:.2f} ms"


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--size", type=int, default=8)
    p.add_argument("--waiting", type=int, default=0, help="gangs reserved before measuring")
    opts = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="escher-gang-filter-") as tmp:
        spec = localcluster.ClusterSpec(
            dir=Path(tmp) / "c", nodes=opts.nodes, mode="extender", kwok=False
        )
        print(f"starting {opts.nodes} nodes", file=sys.stderr, flush=True)
        info = localcluster.up(spec)
        try:
            certs = info.paths["cert_dir"] / "extender"
            ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
            ctx.load_cert_chain(str(certs / "client.crt"), str(certs / "client.key"))
            url = f"https://127.0.0.1:{info.ports['verbs']}"
            extender = next(p for p in info.processes if p.name == "extender")
            base = filter_args(opts.nodes, "plain")
            first, again, plain = [], [], []
            with httpx.Client(base_url=url, verify=ctx, timeout=30) as client:
                rss_before = rss_bytes(extender)
                for i in range(opts.waiting):
                    _, passed = timed(client, member(base, f"w{i}", 0, opts.size))
                    assert len(passed) == 1, f"waiting gang w{i} was not reserved"
                    if i % 100 == 99:
                        print(f"  {i + 1} gangs waiting", file=sys.stderr, flush=True)
                rss_waiting = rss_bytes(extender)
                for i in range(20):  # warm the paths
                    timed(client, member(base, f"warm{i}", 0, opts.size))
                probe = FilterProbe(url, ctx, base)
                healthz = Probe(f"http://127.0.0.1:{info.ports['extender']}")
                try:
                    for i in range(opts.calls):
                        body = member(base, f"g{i}", 0, opts.size)
                        ms, passed = timed(client, body)
                        assert len(passed) == 1, f"gang g{i} was not reserved: {passed[:3]}"
                        ms_again, _ = timed(client, body)
                        ms_plain, _ = timed(client, base)
                        first.append(ms)
                        again.append(ms_again)
                        plain.append(ms_plain)
                finally:
                    probe.close()
                    stall = healthz.worst()
                    healthz.close()
                rss_after = rss_bytes(extender)
        finally:
            localcluster.down(info.dir)
    print(f"filter at {opts.nodes} nodes, {opts.calls} calls each, {opts.waiting} gangs waiting:")
    print(f"- first member of a new gang of {opts.size} (plan and reserve): {summary(first)}")
    print(f"- the same member again (its reserved node): {summary(again)}")
    print(f"- a plain pod, alternating: {summary(plain)}")
    print(
        f"- plain pods from a second connection meanwhile ({len(probe.server)} calls): "
        f"server {summary(probe.server)}; round trip {summary(probe.trip)}"
    )
    print(f"- slowest GET /healthz meanwhile (bounds the longest stall): {stall * 1000:.1f} ms")
    print(
        f"- extender RSS: {rss_before / 2**20:.0f} MiB before, {rss_waiting / 2**20:.0f} MiB "
        f"with {opts.waiting} gangs waiting, {rss_after / 2**20:.0f} MiB after"
    )


if __name__ == "__main__":
    main()
