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

    .venv/bin/python hack/gang-filter-latency.py [--nodes 1000] [--calls 500] [--size 8]
"""

from __future__ import annotations

import argparse
import copy
import json
import ssl
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from escher_harness import localcluster
from escher_harness.bench.latency import args as filter_args


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
            base = filter_args(opts.nodes, "plain")
            first, again, plain = [], [], []
            with httpx.Client(base_url=url, verify=ctx, timeout=30) as client:
                for i in range(opts.calls + 20):
                    body = member(base, f"g{i}", 0, opts.size)
                    ms, passed = timed(client, body)
                    assert len(passed) == 1, f"gang g{i} was not reserved: {passed[:3]}"
                    ms_again, _ = timed(client, body)
                    ms_plain, _ = timed(client, base)
                    if i >= 20:  # the first calls warm the paths
                        first.append(ms)
                        again.append(ms_again)
                        plain.append(ms_plain)
        finally:
            localcluster.down(info.dir)
    print(f"filter at {opts.nodes} nodes, {opts.calls} calls each, server side:")
    print(f"- first member of a new gang of {opts.size} (plan and reserve): {summary(first)}")
    print(f"- the same member again (its reserved node): {summary(again)}")
    print(f"- a plain pod: {summary(plain)}")


if __name__ == "__main__":
    main()
