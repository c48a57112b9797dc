#!/usr/bin/env python3
"""Policy latency through the HTTP API: set_resource until durable, with policies kept as
objects (policy_objects, the default) and in memory (as before), on the same machine in one
run.

For each repetition and each store (alternating which goes first), starts the embedded
cluster in pure mode (`--nodes` kwok-less nodes: nothing but the API server, etcd and the
extender run; the extender's API budget at 1000 QPS so the write-back is not the limit),
then sends `--changes` PUT /v1/resources calls one after the other, half to one node and half
to every node, each a real change (the capacity alternates), and times each from the request
to its 200 (the reply comes once every targeted node carries the change). Prints p50 / p99
per target and store, the ratio objects / memory in the same run, and writes
policy-latency.md and policy-latency.png to --out.

    .venv/bin/python hack/policy-latency.py [--nodes 1000] [--changes 40] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

from escher_harness import localcluster

TARGETS = {"one node": {"node": "node-0"}, "every node": {}}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(out: Path, store: str, nodes: int, changes: int) -> dict[str, list[float]]:
    os.environ["ESCHER_POLICY_OBJECTS"] = "true" if store == "objects" else "false"
    spec = localcluster.ClusterSpec(
        dir=out / f"cluster-{store}", nodes=nodes, mode="pure", kwok=False, client_qps=1000,
        client_burst=1000,
    )  # fmt: skip
    info = localcluster.up(spec, progress=lambda m: print(f"  [{store}] {m}", file=sys.stderr))
    times: dict[str, list[float]] = {t: [] for t in TARGETS}
    try:
        headers = {"Authorization": f"Bearer {info.token}"}
        with httpx.Client(base_url=info.extender_url or "", headers=headers, timeout=60) as c:
            for i in range(changes):
                target = list(TARGETS)[i % len(TARGETS)]
                body = {"capacity": 1 + (i // len(TARGETS)) % 2 + 1, **TARGETS[target]}
                name = "lat-one" if target == "one node" else "lat-all"
                started = time.perf_counter()
                reply = c.put(f"/v1/resources/{name}", json=body)
                elapsed = time.perf_counter() - started
                if reply.status_code != 200:
                    raise SystemExit(f"{store}: {reply.status_code} {reply.text}")
                times[target].append(elapsed * 1000)
    finally:
        localcluster.down(spec.dir)
        os.environ.pop("ESCHER_POLICY_OBJECTS", None)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--changes", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("out/policy-latency"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, dict[str, list[float]]] = {
        s: {t: [] for t in TARGETS} for s in ("memory", "objects")
    }
    medians: dict[str, dict[str, list[float]]] = {s: {t: [] for t in TARGETS} for s in runs}
    for rep in range(args.repeat):
        order = ("memory", "objects") if rep % 2 == 0 else ("objects", "memory")
        for store in order:
            print(f"repetition {rep + 1}/{args.repeat}: {store}", file=sys.stderr)
            got = measure(args.out, store, args.nodes, args.changes)
            for t, v in got.items():
                runs[store][t] += v
                medians[store][t].append(statistics.median(v))
    lines = [
        f"# set_resource to durable, {args.nodes} nodes, {args.changes} changes x "
        f"{args.repeat} repetitions per store (hack/policy-latency.py)",
        "",
        "| target | store | p50 ms | p99 ms | p50 per repetition |",
        "|---|---|---|---|---|",
    ]
    for t in TARGETS:
        for s in runs:
            v = runs[s][t]
            reps = ", ".join(f"{m:.1f}" for m in medians[s][t])
            lines.append(
                f"| {t} | {s} | {statistics.median(v):.1f} | {percentile(v, 0.99):.1f} | {reps} |"
            )
    lines.append("")
    for t in TARGETS:
        ratio = statistics.median(runs["objects"][t]) / statistics.median(runs["memory"][t])
        lines.append(f"- {t}: objects / memory p50 = {ratio:.2f}")
    text = "\n".join(lines) + "\n"
    (args.out / "policy-latency.md").write_text(text)
    print(text)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    data, labels = [], []
    for t in TARGETS:
        for s in runs:
            data.append(runs[s][t])
            labels.append(f"{t}\n{s}")
    ax.boxplot(data, tick_labels=labels, showfliers=True)
    ax.set_ylabel("set_resource to durable (ms)")
    ax.set_title(f"Policy latency, {args.nodes} nodes: objects vs memory")
    fig.tight_layout()
    fig.savefig(args.out / "policy-latency.png", dpi=120)


if __name__ == "__main__":
    main()
