"""The harness's command groups of `escher-extender`: `cluster`, `demo` and `bench`.

Registered under the entry-point group `escher_extender.commands` (harness/pyproject.toml),
so `escher-extender` offers them wherever the harness is installed; the service itself never
imports this package. Each command maps its flags onto the harness's Python API; a run that
cannot be done ends in one line on stderr and exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from escher_harness.localcluster.commands import add_cluster_parser
from escher_harness.localcluster.errors import ClusterError


def add_commands(sub: Any) -> None:
    """The entry point: add `cluster`, `demo` and `bench` to escher-extender's parser."""
    add_cluster_parser(sub)
    _add_demo(sub)
    _add_bench(sub)


def _guarded(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def call(args: argparse.Namespace) -> int:
        try:
            return int(run(args) or 0)
        except (ClusterError, RuntimeError) as e:  # a run that could not be done: say why
            print(f"escher-extender {args.command}: {e}", file=sys.stderr)
            return 1

    return call


def _demo(args: argparse.Namespace) -> int:
    from escher_harness import demo

    return demo.main(args.dir, args.keep)


def _add_demo(sub: Any) -> None:
    p = sub.add_parser("demo", help="run the main job on the embedded local cluster")
    p.add_argument("--dir", type=Path, help="cluster directory (default: a new temporary one)")
    p.add_argument("--keep", action="store_true", help="leave the cluster running afterwards")
    p.set_defaults(func=_guarded(_demo))


def _bench_extender(args: argparse.Namespace) -> int:
    from escher_harness.bench import extender_bench

    base = extender_bench.quick() if args.quick else extender_bench.Config()
    given = {
        "sizes": args.sizes,
        "repeat": args.repeat,
        "pods": args.pods,
        "modes": args.modes,
        "qps": args.qps,
        "latency_seconds": args.seconds,
    }
    cfg = dataclasses.replace(
        base,
        **{k: v for k, v in given.items() if v is not None},
        latency=not args.no_latency,
        throughput=not args.no_throughput,
        memory=base.memory and not args.no_memory,
        profile=args.profile,
        baseline=args.baseline,
    )
    if cfg.qps != base.qps:
        cfg = dataclasses.replace(cfg, burst=int(2 * cfg.qps))
    return extender_bench.run(args.out, cfg)


def _bench_gang(args: argparse.Namespace) -> int:
    from escher_harness.bench import approaches, gang_bench

    wl = (
        gang_bench.quick_workload()
        if args.quick
        else gang_bench.workload(False, args.seconds, args.size, args.rate, args.nodes)
    )
    which = args.approaches or list(approaches.APPROACHES)
    unknown = [a for a in which if a not in approaches.APPROACHES]
    if unknown:
        raise SystemExit(
            f"escher-extender bench gang: unknown approach {unknown[0]!r}; "
            f"choose from {', '.join(approaches.APPROACHES)}"
        )
    return gang_bench.run(args.out, wl, which)


def _bench_esl(args: argparse.Namespace) -> int:
    from escher_harness.bench import esl_bench

    cfg = esl_bench.quick() if args.quick else esl_bench.Config(trials=args.trials)
    return esl_bench.run(args.out, cfg)


def _bench_stall(args: argparse.Namespace) -> int:
    from escher_harness.bench import stall

    print(stall.run(args.out, repeat=args.repeat))
    return 0


def _bench_scheduler_perf(args: argparse.Namespace) -> int:
    from escher_harness.bench import scheduler_perf
    from escher_harness.bench.schedperf_config import ConfigError
    from escher_harness.bench.schedperf_items import DataItemsError

    cfg = scheduler_perf.Config(nodes=args.nodes, repeat=args.repeat)
    if args.test_cases is not None:
        cfg = dataclasses.replace(cfg, test_cases=args.test_cases)
    if args.ways is not None:
        cfg = dataclasses.replace(cfg, ways=args.ways)
    try:
        return scheduler_perf.run(args.out, cfg)
    except (ConfigError, DataItemsError) as e:  # a workload or result not as expected
        raise RuntimeError(str(e)) from None


def _choices(allowed: tuple[str, ...]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        given = text.split(",")
        unknown = [g for g in given if g not in allowed]
        if unknown:
            raise argparse.ArgumentTypeError(f"choose among {', '.join(allowed)}, not {unknown}")
        return given

    return parse


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("sizes must be positive")
    return sizes


def _modes(text: str) -> list[str]:
    from escher_harness.bench.throughput import MODES

    modes = text.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise argparse.ArgumentTypeError(f"modes are among {', '.join(MODES)}, not {unknown}")
    return modes


def _add_bench(sub: Any) -> None:
    p = sub.add_parser("bench", help="benchmarks")
    kinds = p.add_subparsers(dest="benchmark", required=True)
    e = kinds.add_parser(
        "extender", help="filter/prioritize latency and scheduling throughput with vs without"
    )
    e.add_argument("--out", type=Path, required=True, help="directory for results and plots")
    e.add_argument("--quick", action="store_true", help="a small preset (a few minutes)")
    e.add_argument("--sizes", type=_sizes, help="node counts (default 100,1000,5000)")
    e.add_argument("--repeat", type=int, help="repetitions, modes interleaved (default 3)")
    e.add_argument("--pods", type=int, help="pods per throughput run (default 1000)")
    e.add_argument(
        "--modes", type=_modes, help="comma-separated of none,pure,extender (default: all)"
    )
    e.add_argument(
        "--qps", type=float, help="API budget of every client, burst twice it (default 1000)"
    )
    e.add_argument("--seconds", type=float, help="load per latency case (default 5)")
    e.add_argument("--no-latency", action="store_true", help="skip the standalone latency part")
    e.add_argument("--no-throughput", action="store_true", help="skip the throughput part")
    e.add_argument(
        "--no-memory", action="store_true", help="skip the memory part (5,000 nodes, 50,000 pods)"
    )
    e.add_argument(
        "--profile", action="store_true", help="py-spy profile of the extender in repetition 1"
    )
    e.add_argument("--baseline", type=Path, help="an earlier results.json to guard against")
    e.set_defaults(func=_guarded(_bench_extender))
    g = kinds.add_parser("gang", help="gang scheduling: extender, pure, default and peers")
    g.add_argument("--out", type=Path, required=True, help="directory for results and plots")
    g.add_argument("--quick", action="store_true", help="a small preset (a few minutes)")
    g.add_argument(
        "--approaches", type=lambda t: t.split(","), help="comma-separated (default: all five)"
    )
    g.add_argument("--seconds", type=float, default=60.0, help="arrivals last this long")
    g.add_argument("--size", type=int, default=4, help="members per gang")
    g.add_argument("--rate", type=float, default=0.5, help="gangs/s without contention (x4 with)")
    g.add_argument("--nodes", type=int, default=8, help="nodes of 8 cpu, 32Gi")
    g.set_defaults(func=_guarded(_bench_gang))
    s = kinds.add_parser("esl", help="soft constraints and bin-packing: scores vs timeouts")
    s.add_argument("--out", type=Path, required=True, help="directory for results")
    s.add_argument("--quick", action="store_true", help="two trials each (under a minute)")
    s.add_argument("--trials", type=int, default=5, help="trials per scenario")
    s.set_defaults(func=_guarded(_bench_esl))
    t = kinds.add_parser(
        "stall", help="the longest event-loop stall one request causes, seen by /healthz"
    )
    t.add_argument("--out", type=Path, required=True, help="directory for stall.md")
    t.add_argument("--repeat", type=int, default=5, help="times each heavy request is sent")
    t.set_defaults(func=_guarded(_bench_stall))
    from escher_harness.bench.schedperf_config import TEST_CASE_NAMES, WAYS

    k = kinds.add_parser(
        "scheduler-perf",
        help="kube-scheduler's scheduler_perf: default, extender and pure, pods/s and ratios",
    )
    k.add_argument("--out", type=Path, required=True, help="directory for results and plots")
    k.add_argument("--nodes", type=int, default=500, help="workload size: 10, 500 or 1000")
    k.add_argument("--repeat", type=int, default=3, help="repetitions, ways interleaved")
    k.add_argument(
        "--test-cases", type=_choices(TEST_CASE_NAMES), help="comma-separated (default: both)"
    )
    k.add_argument("--ways", type=_choices(WAYS), help="comma-separated (default: all three)")
    k.set_defaults(func=_guarded(_bench_scheduler_perf))
