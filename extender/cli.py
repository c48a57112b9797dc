"""The `escher-extender` command line: serve, cluster (up/down/status), bench.

The console-script entry point (pyproject [project.scripts]) and `python -m extender`.
Each sub-command's flags map onto one typed object (Settings, ClusterSpec, ...); errors a
user can fix end in a one-line message and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from extender import __version__


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from extender import logs
    from extender.app import create_app
    from extender.settings import Settings

    overrides: dict[str, Any] = {
        k: v
        for k, v in {
            "host": args.host,
            "port": args.port,
            "kubeconfig": args.kubeconfig,
            "in_cluster": args.in_cluster or None,
            "token": args.token,
            "resource_domain": args.domain,
            "tls_cert_file": args.tls_cert,
            "tls_key_file": args.tls_key,
            "log_level": args.log_level,
        }.items()
        if v is not None
    }
    if args.no_kube:
        overrides.update(kube=False, bind=False)
    if args.mode == "pure":
        # Pure mode: kube-scheduler alone decides and binds; the service keeps the ledger,
        # serves the policy API and writes back.
        overrides["bind"] = False
    if args.log_format:
        overrides["log_json"] = args.log_format == "json"
    try:
        settings = Settings(**overrides)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in err["loc"]) or "settings"
        raise SystemExit(f"escher-extender serve: {loc}: {err['msg']}") from None
    logs.configure(settings.log_level, settings.log_json)
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        ssl_certfile=str(settings.tls_cert_file) if settings.tls_cert_file else None,
        ssl_keyfile=str(settings.tls_key_file) if settings.tls_key_file else None,
    )
    return 0


def _add_serve(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the extender service")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port to listen on (default 8888)")
    p.add_argument("--kubeconfig", type=Path, help="kubeconfig file (default: $KUBECONFIG)")
    p.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    p.add_argument(
        "--no-kube",
        action="store_true",
        help="standalone: no Kubernetes access; nodes only from requests; no write-back, no bind",
    )
    p.add_argument(
        "--mode",
        choices=["extender", "pure"],
        default="extender",
        help="extender: also bind pods (kube-scheduler's bindVerb); pure: policy API and "
        "write-back only, kube-scheduler decides alone",
    )
    p.add_argument("--token", help="bearer token required on the policy API (/v1)")
    p.add_argument("--domain", help="resource domain pods request (default escher.io)")
    p.add_argument("--tls-cert", type=Path, help="serve HTTPS with this certificate")
    p.add_argument("--tls-key", type=Path, help="... and this key")
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR")
    p.add_argument("--log-format", choices=["json", "text"])
    p.set_defaults(func=_serve)


def _demo(args: argparse.Namespace) -> int:
    from extender import demo

    return demo.main(args.dir, args.keep)


def _add_demo(sub: Any) -> None:
    p = sub.add_parser("demo", help="run the main job on the embedded local cluster")
    p.add_argument("--dir", type=Path, help="cluster directory (default: a new temporary one)")
    p.add_argument("--keep", action="store_true", help="leave the cluster running afterwards")
    p.set_defaults(func=_demo)


def _bench_extender(args: argparse.Namespace) -> int:
    from extender.bench import extender_bench

    if args.quick:
        return extender_bench.run(
            args.out, sizes=(100, 1000), seconds=3, tput_nodes=20, tput_pods=100
        )
    return extender_bench.run(
        args.out,
        sizes=args.sizes,
        seconds=args.seconds,
        tput_nodes=args.tput_nodes,
        tput_pods=args.tput_pods,
    )


def _bench_gang(args: argparse.Namespace) -> int:
    from extender.bench import approaches, gang_bench

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
    from extender.bench import esl_bench

    cfg = esl_bench.quick() if args.quick else esl_bench.Config(trials=args.trials)
    return esl_bench.run(args.out, cfg)


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("sizes must be positive")
    return sizes


def _add_bench(sub: Any) -> None:
    p = sub.add_parser("bench", help="benchmarks")
    kinds = p.add_subparsers(dest="benchmark", required=True)
    e = kinds.add_parser(
        "extender", help="filter/prioritize latency and scheduling throughput with vs without"
    )
    e.add_argument("--out", type=Path, required=True, help="directory for results and plots")
    e.add_argument("--quick", action="store_true", help="a small preset (about two minutes)")
    e.add_argument("--sizes", type=_sizes, default=[100, 1000, 5000], help="node counts")
    e.add_argument("--seconds", type=float, default=10.0, help="load per latency run")
    e.add_argument("--tput-nodes", type=int, default=100, help="nodes for throughput")
    e.add_argument("--tput-pods", type=int, default=500, help="pods for throughput")
    e.set_defaults(func=_bench_extender)
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
    g.set_defaults(func=_bench_gang)
    s = kinds.add_parser("esl", help="soft constraints and bin-packing: scores vs timeouts")
    s.add_argument("--out", type=Path, required=True, help="directory for results")
    s.add_argument("--quick", action="store_true", help="two trials each (under a minute)")
    s.add_argument("--trials", type=int, default=5, help="trials per scenario")
    s.set_defaults(func=_bench_esl)


def build_parser() -> argparse.ArgumentParser:
    from extender.localcluster.commands import add_cluster_parser

    parser = argparse.ArgumentParser(
        prog="escher-extender",
        description="A kube-scheduler extender for ESCHER-style ephemeral resources.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_serve(sub)
    add_cluster_parser(sub)
    _add_demo(sub)
    _add_bench(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from extender.localcluster import ClusterError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ClusterError, RuntimeError) as e:  # a run that could not be done: say why, once
        print(f"escher-extender {args.command}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
