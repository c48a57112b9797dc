#!/usr/bin/env python3
"""What choosing the next HTTP/2 stream to send costs the verbs' listener, per reply, with
N other streams held open (a gang's members waiting at the bind barrier).

Replays the calls hypercorn's HTTP/2 connection makes of its stream scheduler over one bind
burst: N streams are opened and blocked (held, nothing to send); then, one by one, a stream
gets its reply (unblock, next: the headers; block; unblock, next: the body; remove), while
the others are still held. It does this for hypercorn's own scheduler (priority.PriorityTree)
and for extender.http.h2streams.FairStreams, in interleaved rounds, and prints per N the
median over rounds of the CPU per reply and of the longest reply, and the burst's total:

    .venv/bin/python hack/h2-stream-scheduler-cost.py [--held 64,256,512,900] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import priority

from extender.http.h2streams import FairStreams


def burst(make: Callable[[], Any], n: int) -> tuple[float, float]:
    """The burst's CPU seconds, and the longest single reply's."""
    tree = make()
    ids = range(1, 2 * n, 2)
    for i in ids:
        tree.insert_stream(i)
        tree.block(i)
    longest = 0.0
    start = time.thread_time()
    for i in ids:
        t = time.thread_time()
        tree.unblock(i)
        sid = next(tree)
        tree.block(sid)
        tree.unblock(sid)
        sid = next(tree)
        tree.remove_stream(sid)
        longest = max(longest, time.thread_time() - t)
    return time.thread_time() - start, longest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--held", default="64,256,512,900")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    schedulers = {"PriorityTree": priority.PriorityTree, "FairStreams": FairStreams}
    print("| held streams | scheduler | per reply (us) | longest reply (ms) | burst (ms) |")
    print("|---|---|---|---|---|")
    for n in (int(x) for x in args.held.split(",")):
        runs: dict[str, list[tuple[float, float]]] = {k: [] for k in schedulers}
        for _ in range(args.rounds):
            for name, make in schedulers.items():
                runs[name].append(burst(make, n))
        for name, got in runs.items():
            total = statistics.median(t for t, _ in got)
            longest = statistics.median(w for _, w in got)
            print(
                f"| {n} | {name} | {total / n * 1e6:.1f} | {longest * 1e3:.2f} | "
                f"{total * 1e3:.1f} |"
            )


if __name__ == "__main__":
    main()
