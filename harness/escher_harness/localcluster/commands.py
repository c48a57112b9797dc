"""`escher-extender cluster up|down|status`: the command line of the local control plane.

extender.cli calls add_cluster_parser; each sub-command maps its flags onto the Python API
(cluster.up/down/status). Errors end in a one-line message on stderr (the start-up log tail
of a component that failed follows it) and exit status 1, usage errors exit 2.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from types import FrameType

from escher_harness.localcluster import operators
from escher_harness.localcluster.cluster import ClusterInfo, ClusterSpec, adopt, down, status, up
from escher_harness.localcluster.config import DEFAULT_RESOURCE_DOMAIN, MODES, SCOPES
from escher_harness.localcluster.errors import ClusterError


def add_cluster_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cluster = subparsers.add_parser(
        "cluster",
        help="run a local Kubernetes control plane (etcd, kube-apiserver, kube-scheduler)",
    )
    sub = cluster.add_subparsers(dest="cluster_command", required=True)
    _add_up(sub)
    _add_down(sub)
    _add_status(sub)


def _add_up(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("up", help="start a cluster with fake nodes; returns once it is ready")
    _add_dir(p)
    p.add_argument("--nodes", type=int, default=3, help="number of fake nodes (default 3)")
    p.add_argument(
        "--mode",
        choices=MODES,
        default="none",
        help="none: default kube-scheduler; extender: kube-scheduler calls the extender "
        "service; pure: the extender service only writes resources back (default none)",
    )
    p.add_argument(
        "--scheduler-config",
        type=Path,
        metavar="FILE",
        help="KubeSchedulerConfiguration to run instead of the mode's",
    )
    _add_node_shape(p)
    _add_api(p)
    _add_extender(p)
    _add_ports_and_waits(p)
    p.add_argument(
        "--operators",
        type=_operator_names,
        default=(),
        metavar="NAMES",
        help="workload operators to start beside the cluster, comma-separated, of "
        f"{','.join(operators.OPERATORS)} (built by `make operators`; `down` stops them)",
    )
    p.set_defaults(func=_up)


def _add_node_shape(p: argparse.ArgumentParser) -> None:
    """cluster up's flags for what every fake node offers."""
    p.add_argument("--node-cpu", default="32", help="cpu of each node (default 32)")
    p.add_argument("--node-memory", default="128Gi", help="memory of each node (default 128Gi)")
    p.add_argument("--node-pods", default="110", help="pod capacity of each node (default 110)")
    p.add_argument(
        "--node-label",
        type=_pair,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="label every node (repeatable)",
    )
    p.add_argument(
        "--node-resource",
        type=_pair,
        action="append",
        default=[],
        metavar="NAME=QTY",
        help="extended resource on every node (repeatable)",
    )


def _add_api(p: argparse.ArgumentParser) -> None:
    """cluster up's flags for the resources' domain and what kube-apiserver serves."""
    p.add_argument(
        "--resource-domain",
        default=DEFAULT_RESOURCE_DOMAIN,
        help=f"domain of the ephemeral resources (default {DEFAULT_RESOURCE_DOMAIN})",
    )
    p.add_argument(
        "--feature-gate",
        type=_gate,
        action="append",
        default=[],
        metavar="NAME=BOOL",
        help="feature gate for kube-apiserver and kube-scheduler (repeatable)",
    )
    p.add_argument(
        "--runtime-config",
        type=_pair,
        action="append",
        default=[],
        metavar="GROUP/VERSION=BOOL",
        help="kube-apiserver API group (repeatable)",
    )


def _add_extender(p: argparse.ArgumentParser) -> None:
    """cluster up's flags for how the extender runs and is called."""
    p.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="extender replicas (modes extender and pure): more than 1 run with leader "
        "election behind a service proxy at the extender's address (default 1)",
    )
    p.add_argument(
        "--scope",
        choices=SCOPES,
        default="split",
        help="mode extender: which pods kube-scheduler sends the extender. split (the "
        "default, as deploy/ runs it): each exchange only for the pods that need it "
        "(scheduler-config/extender-split.yaml and deploy's marker admission policy: gang "
        "members get filter, bind and preempt, pods with a preference prioritize, the others "
        "none); every-pod: every pod every exchange (scheduler-config/extender.yaml)",
    )


def _add_ports_and_waits(p: argparse.ArgumentParser) -> None:
    """cluster up's fixed ports, kubelets and time to be ready."""
    for component in ("etcd", "apiserver", "scheduler", "extender"):
        p.add_argument(
            f"--{component}-port",
            type=int,
            metavar="PORT",
            help=f"fixed port for {component} (default: a free one)",
        )
    p.add_argument(
        "--no-kwok",
        dest="kwok",
        action="store_false",
        help="run no kwok: bound pods stay Pending instead of running "
        "(and finishing after their harness.escher.io/run-time annotation)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds for all components to become ready (default 120)",
    )


def _add_down(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("down", help="stop a cluster and remove its data (idempotent)")
    _add_dir(p)
    p.add_argument("--keep-logs", action="store_true", help="keep <dir>/logs")
    p.set_defaults(func=_down)


def _add_status(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("status", help="pids, health and memory; exit 1 unless all healthy")
    _add_dir(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_status)


def _add_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, required=True, help="the cluster's directory")


def _up(args: argparse.Namespace) -> int:
    try:
        spec = ClusterSpec(
            dir=args.dir,
            nodes=args.nodes,
            mode=args.mode,
            node_cpu=args.node_cpu,
            node_memory=args.node_memory,
            node_pods=args.node_pods,
            node_labels=dict(args.node_label),
            node_resources=dict(args.node_resource),
            scheduler_config=args.scheduler_config,
            resource_domain=args.resource_domain,
            feature_gates=dict(args.feature_gate),
            runtime_config=dict(args.runtime_config),
            etcd_port=args.etcd_port,
            apiserver_port=args.apiserver_port,
            scheduler_port=args.scheduler_port,
            extender_port=args.extender_port,
            replicas=args.replicas,
            scope=args.scope,
            kwok=args.kwok,
            timeout=args.timeout,
        )
    except ClusterError as e:
        return _fail("up", e, status=2)
    # A terminated `up` (timeout(1), a cancelled CI job) cleans up like an interrupted one.
    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        info = up(spec, progress=lambda message: print(message, file=sys.stderr, flush=True))
        info = _with_operators(info, args.operators)
    except ClusterError as e:
        return _fail("up", e)
    except KeyboardInterrupt:
        print(
            "escher-extender cluster up: interrupted; everything started was stopped",
            file=sys.stderr,
        )
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(_summary(info))
    return 0


def _with_operators(info: ClusterInfo, names: tuple[str, ...]) -> ClusterInfo:
    """`info` with `names` started beside it; a cluster whose operators cannot start is
    taken down whole, as one whose component cannot."""
    if not names:
        return info
    try:
        started = operators.start(names, info)
    except BaseException:
        down(info.dir)
        raise
    return adopt(info.dir, started.records)


def _operator_names(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = sorted(set(names) - set(operators.OPERATORS))
    if unknown:
        known = ",".join(operators.OPERATORS)
        raise argparse.ArgumentTypeError(f"unknown operator(s) {','.join(unknown)}: of {known}")
    return names


def raise_interrupt(signum: int, frame: FrameType | None) -> None:
    """A SIGTERM handler: terminated is handled as interrupted (the harness's CLI)."""
    raise KeyboardInterrupt


def _down(args: argparse.Namespace) -> int:
    try:
        down(args.dir, keep_logs=args.keep_logs)
    except ClusterError as e:
        return _fail("down", e)
    return 0


def _status(args: argparse.Namespace) -> int:
    try:
        st = status(args.dir)
    except ClusterError as e:
        return _fail("status", e)
    if args.json:
        print(json.dumps(st.to_json(), indent=2))
    else:
        print(
            f"{'COMPONENT':<16}{'PID':>8}  {'ALIVE':<6}{'HEALTHY':<8}{'RSS MiB':>8}  {'PORT':>5}"
            f"  {'ROLE':<9}"
        )
        for c in st.components:
            print(
                f"{c.name:<16}{c.pid:>8}  {_yes(c.alive):<6}{_yes(c.healthy):<8}"
                f"{c.rss_bytes / 2**20:>8.1f}  {c.port or '-':>5}  {c.role or '-':<9}"
                + (f"  ({c.detail})" if c.detail else "")
            )
        state = "ready" if st.ready else "not ready (up did not finish)"
        print(f"total RSS {st.total_rss_bytes / 2**20:.1f} MiB; cluster {state}")
    return 0 if st.healthy else 1


def _summary(info: ClusterInfo) -> str:
    kubelets = "kwok (pods run)" if "kwok" in info.pids else "none (bound pods stay Pending)"
    lines = [
        f"cluster ready in {info.ready_seconds:.1f}s: {len(info.nodes)} nodes, "
        f"mode {info.mode}, in {info.dir}",
        f"  apiserver   {info.apiserver}",
        f"  kubeconfig  {info.kubeconfig}",
        f"  kubelets    {kubelets}",
    ]
    if info.extender_url:
        lines.append(
            f"  extender    {info.extender_url} (policy API token in {info.dir}/cluster.json)"
        )
    if info.replica_urls:
        lines.append(
            f"  replicas    {', '.join(info.replica_urls)} behind the service proxy "
            "(`cluster status` shows the leader)"
        )
    lines += [
        f"  logs        {info.paths['logs']}",
        f"stop it with: escher-extender cluster down --dir {info.dir}",
    ]
    return "\n".join(lines)


def _fail(command: str, error: ClusterError, status: int = 1) -> int:
    print(f"escher-extender cluster {command}: {error}", file=sys.stderr)
    return status


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def _gate(text: str) -> tuple[str, bool]:
    name, value = _pair(text)
    if value.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{text!r}: a feature gate is NAME=true or NAME=false")
    return name, value.lower() == "true"
