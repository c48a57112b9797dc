#!/usr/bin/env python3
"""What filled the long event-loop turns that sitecustomize.py (beside this file) recorded.

Reads every turns-*.jsonl in DIR and prints: how many turns went over the threshold and
their CPU, the longest `--top` turns with the kinds of callback that made them up, and over
all those turns, each kind's share of their CPU (the callbacks of a kind, its CPU, and the
CPU of one). The first `--skip` seconds of each process are left out: the start-up (the
ledger built from the nodes, the listeners opened) is not part of a run's stall.

    .venv/bin/python hack/loop-turns/summary.py DIR [--top 10] [--skip 10] [--kinds 20]

A task's chain is shown by its first frame (the task's coroutine) and its last `--frames`
(where it resumed), the frames between elided.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path
from typing import Any


def load(directory: Path, skip: float) -> list[dict[str, Any]]:
    """The turns recorded in `directory`, each process's first `skip` seconds left out; a
    line that is not a whole record (a process killed while writing it) is skipped, and
    counted on stderr."""
    turns: list[dict[str, Any]] = []
    bad = 0
    for path in sorted(directory.glob("turns-*.jsonl")):
        records = []
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
                float(record["at"]), float(record["cpu_ms"]), list(record["kinds"])
            except (ValueError, KeyError, TypeError):
                bad += 1
                continue
            records.append(record)
        if records:
            first = records[0]["at"]
            turns += [r for r in records if r["at"] - first >= skip]
    if bad:
        print(f"{bad} malformed line(s) skipped", file=sys.stderr)
    return turns


def seconds(text: str) -> float:
    value = float(text)
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, not {text}")
    return value


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def short(kind: str, frames: int) -> str:
    """`kind` with the frames between the task's own and the last `frames` elided."""
    what, _, chain = kind.partition(" ")
    parts = chain.split(">")
    if what != "task" or len(parts) <= frames + 1:
        return kind
    return f"{what} {parts[0]}>...>{'>'.join(parts[-frames:])}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory", type=Path)
    ap.add_argument("--top", type=positive, default=10, help="longest turns shown")
    ap.add_argument("--skip", type=seconds, default=10.0, help="start-up seconds left out")
    ap.add_argument("--kinds", type=positive, default=20, help="kinds of callback shown")
    ap.add_argument("--frames", type=positive, default=3, help="innermost frames shown of a task")
    args = ap.parse_args()
    turns = load(args.directory, args.skip)
    if not turns:
        raise SystemExit(f"no turns recorded in {args.directory} after the first {args.skip:g} s")
    cpu = sorted(t["cpu_ms"] for t in turns)
    print(
        f"{len(turns)} turns over the threshold: CPU ms median {cpu[len(cpu) // 2]:.1f}, "
        f"max {cpu[-1]:.1f}; wall ms max {max(t['wall_ms'] for t in turns):.1f}"
    )
    print(f"\nthe {args.top} longest (CPU ms, wall ms, GC ms, callbacks: the kinds that cost most)")
    for t in sorted(turns, key=lambda t: -t["cpu_ms"])[: args.top]:
        kinds = "; ".join(f"{short(k, args.frames)} x{n} {ms:.1f}" for k, n, ms in t["kinds"][:4])
        head = f"{t['cpu_ms']:6.1f} {t['wall_ms']:6.1f} {t['gc_ms']:5.1f} {t['callbacks']:4d}"
        print(f"  {head}: {kinds}")
    total: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for t in turns:
        for kind, n, ms in t["kinds"]:
            total[kind][0] += n
            total[kind][1] += ms
    all_ms = sum(ms for _, ms in total.values())
    print(f"\nkinds of callback in those turns ({all_ms:.0f} ms of CPU): share, count, ms, ms each")
    for kind, (n, ms) in sorted(total.items(), key=lambda kv: -kv[1][1])[: args.kinds]:
        print(
            f"  {ms / all_ms:6.1%} {int(n):6d} {ms:8.1f} {ms / n:6.3f}  {short(kind, args.frames)}"
        )


if __name__ == "__main__":
    main()
