#!/usr/bin/env python3
"""What refusing a whole held gang at once costs the extender's event loop.

When a gang's reservation expires while its members wait at the bind barrier, every held
member is woken together and refused (the 5,000-node benchmark's gang of 1,024 whose members
took longer to create than the reservation lasted: 984 refusals in one second). This starts
the embedded cluster as deploy/ runs the extender (mode extender, split scope, verbs over
HTTP/2 and mutual TLS), creates all but one member of a gang of `--size` + 1 that expires
after `--timeout` seconds, waits until every one is held at bind, and then, until every one
has been refused, probes /healthz every 10 ms from a process of its own (the benchmark's
probe, escher_harness.bench.environment) and counts the loop's lags. Per repetition it
prints the slowest /healthz answer, the lags over 50 and 100 ms, and the extender's log lines
in that window; then the median [min-max] over repetitions.

    .venv/bin/python hack/gang-refusal-burst.py [--size 1024] [--reps 3] [--timeout 45]

Run it with PYTHONPATH naming two checkouts in turn to compare them: the extender process is
started with this interpreter, inherits PYTHONPATH, and (with -P) does not look in the
working directory first.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from escher_harness import localcluster
from escher_harness.bench.environment import ExtenderSampler
from escher_harness.kubeclient import api_client
from escher_harness.workload import Workload, pod_manifest

DOMAIN = "escher.io"
REFUSED = re.compile(
    r"^escher_extender_decisions_total"
    r'\{(?=[^}]*verb="bind")(?=[^}]*outcome="refused")[^}]*\} (\S+)$',
    re.M,
)
LAG_BUCKET = re.compile(r'^escher_event_loop_lag_seconds_bucket\{le="([^"]+)"\} (\S+)$', re.M)


def metrics(url: str) -> str:
    return httpx.get(f"{url}/metrics", timeout=30).text


def refused(text: str) -> int:
    found = REFUSED.search(text)
    return int(float(found.group(1))) if found else 0


def lags_over(text: str) -> dict[str, int]:
    """Lags longer than 50 and 100 ms so far, from the histogram's cumulative buckets."""
    buckets = {le: float(n) for le, n in LAG_BUCKET.findall(text)}
    total = buckets["+Inf"]
    return {"50": int(total - buckets["0.05"]), "100": int(total - buckets["0.1"])}


def at_bind(info: localcluster.ClusterInfo) -> int:
    auth = {"Authorization": f"Bearer {info.token}"}
    gangs = httpx.get(f"{info.extender_url}/v1/gangs", headers=auth, timeout=30).json()
    return sum(m["state"] == "at-bind" for g in gangs for m in g["members"])


def one(size: int, timeout: float, work_dir: Path) -> dict[str, float]:
    spec = localcluster.ClusterSpec(
        dir=work_dir, nodes=40, mode="extender", client_qps=1000, client_burst=2000
    )
    info = localcluster.up(spec)
    try:
        assert info.extender_url is not None
        extender = next(p for p in info.processes if p.name == "extender")
        work = Workload(api_client(info.kubeconfig))
        # One more than is created: the gang never completes, and its reservation expires
        # with every member created held at bind.
        for i in range(size):
            work.create(
                pod_manifest(
                    f"big-{i}",
                    requests={"cpu": "10m"},
                    labels={f"{DOMAIN}/gang": "big"},
                    annotations={
                        f"{DOMAIN}/gang-min": str(size + 1),
                        f"{DOMAIN}/gang-timeout": f"{timeout:g}",
                    },
                    scheduler_name=info.scheduler_name,
                )
            )
        deadline = time.monotonic() + timeout
        while (held := at_bind(info)) < size:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {held} of {size} members reached bind in {timeout:g}s")
            time.sleep(0.5)
        before = metrics(info.extender_url)
        lines_before = extender.log.read_bytes().count(b"\n")
        with ExtenderSampler(info.extender_url, extender, every=0.01) as sampler:
            deadline = time.monotonic() + timeout + 60
            while refused(metrics(info.extender_url)) - refused(before) < size:
                if time.monotonic() > deadline:
                    raise SystemExit("the held members were not all refused")
                time.sleep(0.2)
            time.sleep(1.0)  # the last answers and log lines
        after = metrics(info.extender_url)
        lags0, lags1 = lags_over(before), lags_over(after)
        return {
            "stall_ms": sampler.summary()["longest_stall_ms"],
            "lags_over_50ms": lags1["50"] - lags0["50"],
            "lags_over_100ms": lags1["100"] - lags0["100"],
            "log_lines": extender.log.read_bytes().count(b"\n") - lines_before,
        }
    finally:
        localcluster.down(info.dir)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1024, help="members created and held")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--timeout", type=float, default=45.0, help="the gang's reservation, seconds (< 60)"
    )
    a = parser.parse_args()
    if a.size < 1 or a.reps < 1:
        parser.error("--size and --reps must be at least 1")
    # Finite and under the members' wait at bind (60 s), so the expiry is what wakes them.
    if not 0 < a.timeout < 60:
        parser.error(f"--timeout must be in (0, 60), not {a.timeout}")
    rows = []
    for rep in range(a.reps):
        with tempfile.TemporaryDirectory(prefix="refusal-burst-") as d:
            row = one(a.size, a.timeout, Path(d))
        rows.append(row)
        print(f"rep {rep + 1}: " + ", ".join(f"{k} {v:g}" for k, v in row.items()), flush=True)
    for key in rows[0]:
        xs = [r[key] for r in rows]
        print(f"{key}: {statistics.median(xs):g} [{min(xs):g}-{max(xs):g}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
