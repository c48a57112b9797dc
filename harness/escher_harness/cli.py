"""The harness's command groups of `escher-extender`: `cluster`, `tour` and `bench`.

Registered under the entry-point group `escher_extender.commands` (harness/pyproject.toml),
so `escher-extender` offers them wherever the harness is installed; the service itself never
imports this package. Each command maps its flags onto the harness's Python API; a run that
cannot be done ends in one line on stderr and exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from escher_harness.bench.approaches import registry
from escher_harness.localcluster.commands import add_cluster_parser, raise_interrupt
from escher_harness.localcluster.config import SCOPES
from escher_harness.localcluster.cpus import SIDES, CpuSplit
from escher_harness.localcluster.errors import ClusterError
from escher_harness.localcluster.processes import autogroup_nice_refused


def add_commands(sub: Any) -> None:
    """The entry point: add `cluster`, `tour` and `bench` to escher-extender's parser."""
    add_cluster_parser(sub)
    _add_tour(sub)
    _add_bench(sub)


def _guarded(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def call(args: argparse.Namespace) -> int:
        # Terminated (timeout(1), a cancelled job, kill) as interrupted (Ctrl-C): the clusters
        # and load generators a run started are stopped on the way out, not orphaned.
        previous = signal.signal(signal.SIGTERM, raise_interrupt)
        try:
            return int(run(args) or 0)
        except (ClusterError, RuntimeError) as e:  # a run that could not be done: say why
            print(f"escher-extender {args.command}: {e}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print(
                f"escher-extender {args.command}: interrupted; what it started was stopped",
                file=sys.stderr,
            )
            return 130
        finally:
            signal.signal(signal.SIGTERM, previous)

    return call


def _tour(args: argparse.Namespace) -> int:
    from escher_harness import tour

    return tour.main(args.dir, args.keep)


def _add_tour(sub: Any) -> None:
    p = sub.add_parser(
        "tour",
        help="a two-minute tour of ephemeral resources on the embedded local cluster "
        "(the main job, the gang comparison, is `make demo`)",
    )
    p.add_argument("--dir", type=Path, help="cluster directory (default: a new temporary one)")
    p.add_argument("--keep", action="store_true", help="leave the cluster running afterwards")
    p.set_defaults(func=_guarded(_tour))


def _percentage(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 0 to 100")
    return value


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
        "wake_trials": args.wake_trials,
        "wake_pods": args.wake_pods,
        "percentage_of_nodes_to_score": args.percentage_of_nodes_to_score,
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
    from escher_harness.bench import approaches, gang_bench, presets

    if args.cpu_split:
        CpuSplit.halves(args.cpu_split)  # on one CPU: refused here, not in every run
    if args.extender_nice and (refused := autogroup_nice_refused(args.extender_nice)):
        raise ClusterError(f"--extender-nice: {refused}")
    which = args.approaches or list(approaches.APPROACHES)
    unknown = [a for a in which if a not in approaches.APPROACHES]
    if unknown:
        raise SystemExit(
            f"escher-extender bench gang: unknown approach {unknown[0]!r}; "
            f"choose from {', '.join(approaches.APPROACHES)}"
        )
    try:
        preset = presets.customised(
            presets.PRESETS["quick" if args.quick else args.preset],
            scenarios=args.scenarios,
            nodes=args.nodes,
            repeat=args.repeat,
            seed=args.seed,
            qps=args.qps,
            burst=args.burst,
            extender_scope=args.extender_scope,
            cpu_split=args.cpu_split,
            extender_nice=args.extender_nice,
            percentage_of_nodes_to_score=args.percentage_of_nodes_to_score,
            rate=args.rate,
            duration=args.duration,
            sizes=args.sizes,
            shapes=args.shapes,
            run_time=args.run_time,
            deadline=args.deadline,
        )
    except ValueError as e:  # a distribution or scenario field that does not parse
        raise SystemExit(f"escher-extender bench gang: {e}") from None
    return gang_bench.run(args.out, preset, which, resume=args.resume, command=_command(args))


def _command(args: argparse.Namespace) -> str:
    """The bench gang command as given, for the report."""
    parts = ["escher-extender", "bench", "gang"]
    for name, value in sorted(vars(args).items()):
        if name in ("func", "command", "benchmark") or value in (None, False):
            continue
        if name == "preset" and args.quick:  # --quick names the preset; the default is moot
            continue
        flag = "--" + name.replace("_", "-")
        if value is True:
            parts.append(flag)
        elif isinstance(value, list):
            parts += [flag, ",".join(map(str, value))]
        else:
            parts += [flag, str(value)]
    return " ".join(parts)


def _bench_esl(args: argparse.Namespace) -> int:
    from escher_harness.bench import esl_bench

    cfg = esl_bench.quick() if args.quick else esl_bench.Config(trials=args.trials)
    return esl_bench.run(args.out, cfg)


def _bench_paper(args: argparse.Namespace) -> int:
    from escher_harness.bench.paper import runner

    cfg = runner.quick() if args.quick else runner.Config()
    if args.experiments:
        cfg = dataclasses.replace(cfg, experiments=tuple(args.experiments))
    if args.modes:
        cfg = dataclasses.replace(cfg, modes=tuple(args.modes))
    if args.repeat:
        cfg = dataclasses.replace(cfg, repeat=args.repeat)
    try:
        runner.check(cfg)
    except ValueError as e:
        raise SystemExit(f"escher-extender bench paper: {e}") from None
    return runner.run(args.out, cfg, " ".join(["escher-extender", *sys.argv[1:]]))


def _bench_gang_timeline(args: argparse.Namespace) -> int:
    from escher_harness.bench import gang_timeline

    gang_timeline.main(
        args.out,
        which=args.approaches or gang_timeline.APPROACHES,
        gangs=args.gangs,
        size=args.size,
        repeat=args.repeat,
    )
    return 0


def _bench_stall(args: argparse.Namespace) -> int:
    from escher_harness.bench import stall

    print(stall.run(args.out, repeat=args.repeat))
    return 0


def _bench_failover(args: argparse.Namespace) -> int:
    from escher_harness.bench import failover

    if args.sidecar and args.scope != "split":
        raise SystemExit("--sidecar runs deploy/overlays/sidecar's split: no --scope every-pod")
    layout: failover.Layout = "sidecar" if args.sidecar else args.scope
    print(failover.run(args.out, repeat=args.repeat, layout=layout))
    return 0


def _bench_outage(args: argparse.Namespace) -> int:
    from escher_harness.bench import outage

    report, held = outage.run(args.out, runs=args.runs, pause=args.pause)
    print(report)
    return 0 if held else 1


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


def _bench_scheduling_perf(args: argparse.Namespace) -> int:
    from escher_harness.bench.kubeschedperf import run, shapes

    base = run.quick() if args.quick else run.Config()
    unknown = [a for a in args.approaches or () if a not in registry.APPROACHES]
    if unknown:
        raise SystemExit(
            f"escher-extender bench scheduling-perf: unknown approach {unknown[0]!r}; "
            f"choose from {', '.join(registry.APPROACHES)}"
        )
    try:
        scenarios = shapes.chosen(args.scenarios)
    except ValueError as e:
        raise SystemExit(f"escher-extender bench scheduling-perf: {e}") from None
    given = {
        "approaches": tuple(args.approaches) if args.approaches else None,
        "repeat": args.repeat,
        "nodes": args.nodes,
        "pods": args.pods,
        "stall": args.stall,
        "timeout": args.timeout,
    }
    cfg = dataclasses.replace(
        base, scenarios=scenarios, **{k: v for k, v in given.items() if v is not None}
    )
    return run.run(args.out, cfg, command=" ".join(["escher-extender", *sys.argv[1:]]))


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
    from escher_harness.bench.throughput import ALL_MODES

    modes = text.split(",")
    unknown = [m for m in modes if m not in ALL_MODES]
    if unknown or not modes:
        raise argparse.ArgumentTypeError(f"modes are among {', '.join(ALL_MODES)}, not {unknown}")
    return modes


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _positive_int(text: str) -> int:
    n = _whole(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return n


def _nice(text: str) -> int:
    n = _whole(text)
    if not -20 <= n <= 19:
        raise argparse.ArgumentTypeError(f"{text!r} is not a nice value (-20..19)")
    return n


def _positive_float(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not x > 0 or x == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number > 0")
    return x


def _add_bench(sub: Any) -> None:
    p = sub.add_parser("bench", help="benchmarks")
    kinds = p.add_subparsers(dest="benchmark", required=True)
    _add_bench_extender(kinds)
    _add_bench_gang(kinds)
    _add_bench_esl(kinds)
    _add_bench_paper(kinds)
    _add_bench_gang_timeline(kinds)
    _add_bench_stall(kinds)
    _add_bench_failover(kinds)
    _add_bench_outage(kinds)
    _add_bench_scheduler_perf(kinds)
    _add_bench_scheduling_perf(kinds)


def _add_bench_extender(kinds: Any) -> None:
    e = kinds.add_parser(
        "extender", help="filter/prioritize latency and scheduling throughput with vs without"
    )
    e.add_argument("--out", type=Path, required=True, help="directory for results and plots")
    e.add_argument("--quick", action="store_true", help="a small preset (a few minutes)")
    e.add_argument("--sizes", type=_sizes, help="node counts (default 100,1000,5000)")
    e.add_argument("--repeat", type=int, help="repetitions, modes interleaved (default 3)")
    e.add_argument("--pods", type=int, help="pods per throughput run (default 1000)")
    e.add_argument(
        "--modes",
        type=_modes,
        help="comma-separated of none,pure,extender (default: these three), extender-http "
        "(the verbs over plain HTTP instead of mutual TLS), extender-split (each exchange "
        "only for the pods that need it, as deploy/ runs it: filter and prioritize over "
        "HTTP/1.1, bind over HTTP/2), extender-split-h2 (the same, every verb over HTTP/2), "
        "extender-split-h1 (every verb over HTTP/1.1), extender-split-http (the "
        "same over plain HTTP on loopback, as deploy/overlays/sidecar runs it), dra (pure "
        "with the resources as DRA devices, allocated by kube-scheduler's DynamicResources) "
        "and none-markers (kube-scheduler alone, its nodes advertising the extender's "
        "markers: what they cost it apart)",
    )
    e.add_argument(
        "--wake-trials",
        type=int,
        help="set_resource-to-schedulable trials per throughput run of a mode with a policy "
        "API (default 5, quick 3; 0: none)",
    )
    e.add_argument(
        "--wake-pods", type=_positive_int, help="pods waiting in each such trial (default 10)"
    )
    e.add_argument(
        "--percentage-of-nodes-to-score",
        type=_percentage,
        help="equalise kube-scheduler's percentageOfNodesToScore for every mode (0: its "
        "adaptive default; 100: every node), to isolate the exchanges (default: each mode as "
        "it ships: adaptive for none, pure and dra, deploy/'s profiles for the extender)",
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


def _add_bench_gang(kinds: Any) -> None:
    g = kinds.add_parser(
        "gang",
        help="gang scheduling: eleven approaches replay one workload trace",
        description="Replays one workload (generated from a seed) against the extender (plain, "
        "with the gang gate, and with the adaptive gang gate), the pure approach (plan and "
        "ghost variants, and the plan variant with the resources as DRA devices: dra), plain "
        "kube-scheduler, Coscheduling, native gang scheduling and Kueue TAS, on a "
        "fresh cluster per run, interleaved over repetitions. "
        "Scenario options apply to every scenario of the preset kept (see --scenarios).",
    )
    g.add_argument("--out", type=Path, required=True, help="directory for results and plots")
    g.add_argument(
        "--preset",
        choices=("quick", "standard", "escher", "scale", "topology"),
        default="standard",
        help="cluster, scenarios and repetitions (default: standard)",
    )
    g.add_argument("--quick", action="store_true", help="the quick preset (what make demo runs)")
    g.add_argument(
        "--approaches",
        type=_names,
        help=f"comma-separated (default: all {len(registry.APPROACHES)})",
    )
    g.add_argument(
        "--scenarios",
        type=_names,
        help="no-contention,contention (topology: no-topology,required,preferred; default: all)",
    )
    g.add_argument("--repeat", type=_positive_int, help="repetitions (default: the preset's)")
    g.add_argument("--seed", type=int, help="the workload's seed (default: the preset's, 1)")
    g.add_argument("--resume", action="store_true", help="keep the runs already in --out")
    _add_gang_scenario(g)
    _add_gang_cluster(g)
    g.set_defaults(func=_guarded(_bench_gang))


def _add_gang_scenario(g: argparse.ArgumentParser) -> None:
    """bench gang's scenario fields, each applied to every scenario of the preset kept."""
    g.add_argument("--nodes", type=_positive_int, help="nodes (each of the preset's shape)")
    g.add_argument("--rate", type=_positive_float, help="gang arrivals per second (Poisson)")
    g.add_argument("--duration", type=_positive_float, help="seconds of arrivals")
    g.add_argument("--sizes", help="gang size distribution, e.g. 2:3,4:2,8:1 (value:weight)")
    g.add_argument("--shapes", help="member cpu/memory, e.g. 1/1Gi:3,2/2Gi:1")
    g.add_argument(
        "--run-time", help="run time distribution (s): 5, uniform:2,8, exp:5, lognormal:4,0.6,20"
    )
    g.add_argument("--deadline", type=_positive_float, help="seconds before a gang is given up")


def _add_gang_cluster(g: argparse.ArgumentParser) -> None:
    """bench gang's flags for how every approach's cluster runs."""
    g.add_argument("--qps", type=_positive_float, help="every scheduler's client qps (1000)")
    g.add_argument("--burst", type=_positive_int, help="every scheduler's client burst (2000)")
    g.add_argument(
        "--percentage-of-nodes-to-score",
        type=_percentage,
        help="equalise kube-scheduler's percentageOfNodesToScore for every approach (0: its "
        "adaptive default; 100: every node), to isolate the exchanges (default: each approach "
        "as it ships)",
    )
    g.add_argument(
        "--extender-scope",
        choices=SCOPES,
        help="how kube-scheduler calls the extender approaches' extender (default: split, "
        "as deploy/ does; every-pod: every pod every exchange over HTTP/2)",
    )
    g.add_argument(
        "--cpu-split",
        nargs="?",
        const="scheduling",
        choices=SIDES,
        help="run kube-scheduler and the extender (scheduling, the value without one) or the "
        "extender alone (extender) on half of the CPUs, the rest of the cluster and the load "
        "generator on the other half (default: all share every CPU)",
    )
    g.add_argument(
        "--extender-nice",
        type=_nice,
        metavar="N",
        help="the extender's CPU share, as its CPU request would set it: its session's "
        "autogroup nice, -20..19 (default 0: the share of every other process; -5: about 3x, "
        "-10: about 9x; below 0 needs CAP_SYS_NICE)",
    )


def _add_bench_esl(kinds: Any) -> None:
    s = kinds.add_parser("esl", help="soft constraints and bin-packing: scores vs timeouts")
    s.add_argument("--out", type=Path, required=True, help="directory for results")
    s.add_argument("--quick", action="store_true", help="two trials each (under a minute)")
    s.add_argument("--trials", type=int, default=5, help="trials per scenario")
    s.set_defaults(func=_guarded(_bench_esl))


def _add_bench_paper(kinds: Any) -> None:
    p = kinds.add_parser(
        "paper",
        help="the ESCHER paper's experiments (E1-E3, E6-E9), each beside the paper's number",
    )
    p.add_argument("--out", type=Path, required=True, help="directory for results")
    p.add_argument(
        "--experiments",
        type=_names,
        help="comma-separated, of E6,E1,E2,E3,E7,E8,E9 (default: all)",
    )
    p.add_argument(
        "--modes",
        type=_names,
        help="E7-E9's modes, comma-separated, of pure,extender,dra (default: all)",
    )
    p.add_argument("--repeat", type=int, help="interleaved repetitions (default 3, quick 1)")
    p.add_argument(
        "--quick", action="store_true", help="every experiment small, once per mode or approach"
    )
    p.set_defaults(func=_guarded(_bench_paper))


def _add_bench_gang_timeline(kinds: Any) -> None:
    tl = kinds.add_parser(
        "gang-timeline",
        help="one gang at a time: where its time goes, extender vs the in-framework peers",
    )
    tl.add_argument("--out", type=Path, required=True, help="directory for results")
    tl.add_argument(
        "--approaches",
        type=_choices(registry.TIMELINE),
        help="comma-separated (default: all five)",
    )
    tl.add_argument("--gangs", type=_positive_int, default=20, help="gangs per run")
    tl.add_argument("--size", type=_positive_int, default=4, help="members per gang")
    tl.add_argument("--repeat", type=_positive_int, default=3, help="repetitions, interleaved")
    tl.set_defaults(func=_guarded(_bench_gang_timeline))


def _add_bench_stall(kinds: Any) -> None:
    t = kinds.add_parser(
        "stall", help="the longest event-loop stall one request causes, seen by /healthz"
    )
    t.add_argument("--out", type=Path, required=True, help="directory for stall.md")
    t.add_argument("--repeat", type=int, default=5, help="times each heavy request is sent")
    t.set_defaults(func=_guarded(_bench_stall))


def _add_bench_failover(kinds: Any) -> None:
    f = kinds.add_parser(
        "failover",
        help="seconds from SIGKILL or SIGSTOP of the leader to the next bind, as deploy/ ships it",
    )
    f.add_argument("--out", type=Path, required=True, help="directory for failover.md and .png")
    f.add_argument("--repeat", type=_positive_int, default=3, help="rounds of both signals")
    f.add_argument(
        "--scope",
        choices=("split", "every-pod"),
        default="split",
        help="split (the default, as deploy/ runs it: each exchange only for the pods that "
        "need it, filter and prioritize over HTTP/1.1, bind over HTTP/2) or every pod every "
        "exchange over HTTP/2",
    )
    f.add_argument(
        "--sidecar",
        action="store_true",
        help="deploy/overlays/sidecar's configuration: the split over plain HTTP/1.1",
    )
    f.set_defaults(func=_guarded(_bench_failover))


def _add_bench_outage(kinds: Any) -> None:
    o = kinds.add_parser(
        "outage",
        help="kube-apiserver paused under policy and binding load: each change on all its "
        "nodes or none, no node over capacity, time to recover",
    )
    o.add_argument("--out", type=Path, required=True, help="directory for outage.md and .png")
    o.add_argument("--runs", type=_positive_int, default=5, help="outages, each a fresh cluster")
    o.add_argument("--pause", type=_positive_float, default=30.0, help="seconds paused")
    o.set_defaults(func=_guarded(_bench_outage))


def _add_bench_scheduler_perf(kinds: Any) -> None:
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


def _add_bench_scheduling_perf(kinds: Any) -> None:
    k = kinds.add_parser(
        "scheduling-perf",
        help="kube-scheduling-perf's eight scenarios (10,000 pods in jobs of 1 to 10,000, "
        "with and without gang) timed from the API server's audit log",
        description="Runs kube-scheduling-perf's matrix (github.com/wzshiming/"
        "kube-scheduling-perf, as its fork publishes it) on the embedded control plane: "
        "a fresh cluster per run, repetitions interleaved; docs/scheduling-perf.md.",
    )
    k.add_argument("--out", type=Path, required=True, help="directory for results and plots")
    k.add_argument(
        "--scenarios",
        type=_names,
        help="comma-separated of 10000x1,500x20,20x500,1x10000 and the same with -gang "
        "(default: all eight)",
    )
    k.add_argument(
        "--approaches",
        type=_names,
        help="comma-separated (default: extender,native,coscheduling; default runs the "
        "scenarios without gang)",
    )
    k.add_argument("--repeat", type=_positive_int, help="repetitions, interleaved (default 3)")
    k.add_argument("--nodes", type=_positive_int, help="kwok nodes (default 1000)")
    k.add_argument(
        "--pods",
        type=_positive_int,
        help="pods per scenario (default 10000); a job keeps its size where it fits",
    )
    k.add_argument(
        "--stall",
        type=_positive_float,
        help="seconds without a binding, all pods created, before a run gives up (default 120)",
    )
    k.add_argument(
        "--timeout", type=_positive_float, help="seconds one run may take (default 1800)"
    )
    k.add_argument(
        "--quick", action="store_true", help="50 nodes, 500 pods, one repetition (minutes)"
    )
    k.set_defaults(func=_guarded(_bench_scheduling_perf))
