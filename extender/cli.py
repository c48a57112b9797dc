"""The `escher-extender` command line: `serve`, and the command groups of installed plugins.

The console-script entry point (pyproject [project.scripts]) and `python -m extender`.
`serve` maps its flags onto the one typed Settings object; errors a user can fix end in a
one-line message and exit status 2, never a traceback.

Other command groups (the harness's `cluster`, `tour` and `bench`) are not part of the
service: a distribution adds them through the entry-point group `escher_extender.commands`,
each entry a function that adds its sub-parsers. The service image installs none, so there
`escher-extender` is `serve` alone; the service never imports the harness.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from extender import __version__


def _serve(args: argparse.Namespace) -> int:
    from extender import logs
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
            "verbs_port": args.verbs_port,
            "verbs_client_ca_file": args.verbs_client_ca,
            "verbs_tls_cert_file": args.verbs_tls_cert,
            "verbs_tls_key_file": args.verbs_tls_key,
            "kubernetes_auth": args.kubernetes_auth or None,
            "leader_elect": args.leader_elect or None,
            "lease_name": args.lease_name,
            "lease_namespace": args.lease_namespace,
            "identity": args.identity,
            "kube_qps": args.kube_qps,
            "gang_gate_switch": args.gang_gate_switch,
            "kube_burst": args.kube_burst,
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
        msg = str(err["msg"]).removeprefix("Value error, ")
        print(f"escher-extender serve: {loc}: {msg}", file=sys.stderr)
        return 2
    logs.configure(settings.log_level, settings.log_json)
    from extender import server

    return server.run(settings)


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
    p.add_argument(
        "--verbs-port",
        type=int,
        help="serve kube-scheduler's verbs on this port only (TLS; with --verbs-client-ca, "
        "mutual TLS)",
    )
    p.add_argument(
        "--verbs-client-ca",
        type=Path,
        help="require kube-scheduler's client certificate, signed by this CA, on --verbs-port",
    )
    p.add_argument(
        "--verbs-tls-cert",
        type=Path,
        help="the --verbs-port listener's own certificate (default: --tls-cert), so the verbs "
        "can be mutual TLS while --port stays plain HTTP",
    )
    p.add_argument("--verbs-tls-key", type=Path, help="... and its key (default: --tls-key)")
    p.add_argument(
        "--kubernetes-auth",
        action="store_true",
        help="accept Kubernetes tokens on the policy API: TokenReview, then RBAC through "
        "SubjectAccessReview (docs/policy-api.md)",
    )
    p.add_argument("--leader-elect", action="store_true", help="run as one of several replicas")
    p.add_argument("--lease-name", help="the Lease replicas compete for (escher-extender)")
    p.add_argument("--lease-namespace", help="its namespace (kube-system)")
    p.add_argument("--identity", help="this replica's name in the lease (hostname_pid)")
    p.add_argument(
        "--gang-gate-switch",
        help="NAMESPACE/NAME of the ConfigMap the adaptive gang-gate policy reads: the "
        "extender sets its hold while gangs wait for room (default: none written)",
    )
    p.add_argument("--kube-qps", type=float, help="the extender's API budget (50)")
    p.add_argument("--kube-burst", type=int, help="... and burst (100)")
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING or ERROR")
    p.add_argument("--log-format", choices=["json", "text"])
    p.set_defaults(func=_serve)


COMMANDS_GROUP = "escher_extender.commands"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="escher-extender",
        description="A kube-scheduler extender for ESCHER-style ephemeral resources.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_serve(sub)
    for entry in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        entry.load()(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
