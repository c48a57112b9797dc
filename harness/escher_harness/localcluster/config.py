"""Pure rendering of everything the control plane is started with: the kubeconfig, the token
file, the KubeSchedulerConfiguration, and the command lines of etcd, kube-apiserver,
kube-scheduler, kwok, the extender service (alone, or as replicas electing a leader) and the
service proxy in front of the replicas.

Called by cluster.up, which writes the results into the cluster directory; nothing here starts
a process, and only the scheduler-config helpers read files.
"""

from __future__ import annotations

import copy
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import yaml

from escher_harness.localcluster.errors import ClusterError
from escher_harness.localcluster.fakenodes import FAKE_NODE_ANNOTATION
from escher_harness.localcluster.paths import scheduler_config_dir
from escher_harness.localcluster.pki import Pki
from extender.core.pod import Keys

Mode = Literal["none", "extender", "pure", "dra"]
MODES: Final[tuple[Mode, ...]] = ("none", "extender", "pure", "dra")
# Which pods kube-scheduler sends the extender in mode extender (ClusterSpec.scope).
Scope = Literal["split", "every-pod"]
SCOPES: Final[tuple[Scope, ...]] = ("split", "every-pod")

DEFAULT_RESOURCE_DOMAIN: Final = "escher.io"
DEFAULT_SCHEDULER_NAME: Final = "default-scheduler"
ALL_NODES_SUFFIX: Final = "-all-nodes"
SCHEDULER_API_VERSION: Final = "kubescheduler.config.k8s.io/v1"
SCHEDULER_KIND: Final = "KubeSchedulerConfiguration"
# What an extender's urlPrefix says in a template (or a user's copy of one) until the launcher
# knows the extender's port.
EXTENDER_URL_PLACEHOLDER: Final = "${EXTENDER_URL}"
# ... and of the entries kube-scheduler calls one pod at a time (filter, prioritize), filled in
# with the verbs' HTTP/1.1 listener when the extender has one, else as EXTENDER_URL.
EXTENDER_HTTP1_URL_PLACEHOLDER: Final = "${EXTENDER_HTTP1_URL}"

# Replicas of the extender (ClusterSpec.replicas > 1): components extender-0, extender-1, ...
# behind the service proxy, competing for one Lease. A lone extender is "extender".
LEASE_NAME: Final = "escher-extender"
LEASE_NAMESPACE: Final = "kube-system"  # kube-apiserver creates it at start
SERVICE_PROXY: Final = "extender-proxy"
# The port name of the extender's mutual-TLS listener for kube-scheduler's verbs (extender
# mode); a replica's is VERBS-<index>.
VERBS: Final = "verbs"
# ... and of its HTTP/1.1 listener beside it (--verbs-http1-port); a replica's VERBS_HTTP1-<i>.
VERBS_HTTP1: Final = "verbs-http1"
_REPLICA = re.compile(r"^extender-(\d+)$")


def replica_name(index: int) -> str:
    return f"extender-{index}"


def is_replica(component: str) -> bool:
    return _REPLICA.match(component) is not None


@dataclass(frozen=True)
class LeaseTimes:
    """Leader election's durations for the extender's replicas, in seconds; the defaults are
    kube-scheduler's. Tests shorten them to keep failovers quick."""

    duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.duration:
            raise ClusterError(
                "lease times must satisfy 0 < retry_period < renew_deadline < duration, not "
                f"retry_period={self.retry_period:g}, renew_deadline={self.renew_deadline:g}, "
                f"duration={self.duration:g}"
            )

    def environment(self) -> dict[str, str]:
        """The extender's settings (extender.settings) for these times."""
        return {
            "ESCHER_LEASE_DURATION_SECONDS": f"{self.duration:g}",
            "ESCHER_RENEW_DEADLINE_SECONDS": f"{self.renew_deadline:g}",
            "ESCHER_RETRY_PERIOD_SECONDS": f"{self.retry_period:g}",
        }


def render_kubeconfig(server: str, token: str) -> str:
    """A kubeconfig with bearer-token auth; TLS is not verified (self-signed, loopback only)."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "local", "cluster": {"server": server, "insecure-skip-tls-verify": True}}
            ],
            "users": [{"name": "admin", "user": {"token": token}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}],
            "current-context": "local",
        },
        sort_keys=False,
    )


def render_tokens_csv(token: str) -> str:
    """kube-apiserver's --token-auth-file: one admin in system:masters (RBAC lets it do all)."""
    return f'{token},admin,admin,"system:masters"\n'


def parse_scheduler_config(text: str, source: str) -> dict[str, Any]:
    """Parse a KubeSchedulerConfiguration and check what can be checked before kube-scheduler
    runs: YAML syntax, apiVersion, kind, and the shape of the sections the launcher edits."""
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ClusterError(f"scheduler config {source} is not valid YAML: {_one_line(e)}") from None
    if not isinstance(config, dict):
        raise ClusterError(f"scheduler config {source} is not a YAML mapping")
    for key, want in (("apiVersion", SCHEDULER_API_VERSION), ("kind", SCHEDULER_KIND)):
        if config.get(key) != want:
            raise ClusterError(
                f"scheduler config {source}: {key} is {config.get(key)!r}, expected {want!r}"
            )
    for key, kind in (
        ("clientConnection", dict),
        ("leaderElection", dict),
        ("profiles", list),
        ("extenders", list),
    ):
        if config.get(key) is not None and not isinstance(config[key], kind):
            shape = "mapping" if kind is dict else "list"
            raise ClusterError(f"scheduler config {source}: {key} must be a {shape}")
    return config


def load_scheduler_config(path: Path) -> dict[str, Any]:
    """Read and parse a user-supplied KubeSchedulerConfiguration file."""
    try:
        text = path.read_text()
    except OSError as e:
        raise ClusterError(f"cannot read scheduler config {path}: {e.strerror}") from None
    return parse_scheduler_config(text, str(path))


def scheduler_config(
    mode: Mode,
    *,
    user_config: Mapping[str, Any] | None,
    kubeconfig: Path,
    extender_url: str | None,
    client_qps: float | None = None,
    client_burst: int | None = None,
    percentage_of_nodes_to_score: int | None = None,
    verbs_tls: Pki | None = None,
    split: str | None = None,
    http1_url: str | None = None,
) -> dict[str, Any]:
    """The configuration kube-scheduler runs with.

    The base is the user's file if given, else the mode's template (scheduler-config/<mode>.yaml;
    it names no resource domain: NodeResourcesFit checks every extended resource), else (mode
    none) the defaults. The launcher
    always sets clientConnection.kubeconfig, turns leader election off, and points extenders
    whose urlPrefix is EXTENDER_URL_PLACEHOLDER at extender_url and those whose urlPrefix is
    EXTENDER_HTTP1_URL_PLACEHOLDER at `http1_url` (else extender_url), over mutual TLS with
    `verbs_tls`; the client's qps and burst, and percentageOfNodesToScore, when given. With
    `split` (a resource domain), mode extender's template is scheduler-config/extender-split.yaml
    (each exchange only for the pods marked for it, as deploy/ runs the extender), its markers
    in that domain.
    """
    if user_config is not None:
        config = copy.deepcopy(dict(user_config))
    elif split is not None and mode == "extender":
        config = split_config(split)
    else:
        config = mode_config(mode)
    config["clientConnection"] = {
        **(config.get("clientConnection") or {}),
        "kubeconfig": str(kubeconfig),
    }
    if client_qps is not None:
        config["clientConnection"]["qps"] = client_qps
    if client_burst is not None:
        config["clientConnection"]["burst"] = client_burst
    if percentage_of_nodes_to_score is not None:
        config["percentageOfNodesToScore"] = percentage_of_nodes_to_score
    config["leaderElection"] = {**(config.get("leaderElection") or {}), "leaderElect": False}
    if extender_url is not None:
        point_extenders(config, extender_url, verbs_tls, http1_url=http1_url)
    return config


def mode_config(mode: Mode) -> dict[str, Any]:
    """The mode's template (scheduler-config/<mode>.yaml), or for mode none the defaults;
    nothing filled in yet."""
    if mode == "none":
        return {"apiVersion": SCHEDULER_API_VERSION, "kind": SCHEDULER_KIND}
    return _template(mode)


def split_config(domain: str) -> dict[str, Any]:
    """scheduler-config/extender-split.yaml with its markers in `domain` (the file's are
    escher.io's, Keys.for_domain names them)."""
    config = _template("extender-split")
    keys, default = Keys.for_domain(domain), Keys.for_domain(DEFAULT_RESOURCE_DOMAIN)
    rename = dict(zip(default.markers, keys.markers, strict=True))
    for extender in config.get("extenders") or []:
        for managed in extender.get("managedResources") or []:
            managed["name"] = rename[managed["name"]]
    return config


def point_extenders(
    config: Mapping[str, Any],
    extender_url: str,
    tls: Pki | None = None,
    *,
    http1_url: str | None = None,
) -> None:
    """Point the extenders whose urlPrefix is EXTENDER_URL_PLACEHOLDER at extender_url, and
    those whose urlPrefix is EXTENDER_HTTP1_URL_PLACEHOLDER at `http1_url` (the verbs' HTTP/1.1
    listener; without one, extender_url); with `tls`, kube-scheduler verifies the extender
    against its CA and shows its client certificate (mutual TLS, as deploy/ runs it)."""
    urls = {
        EXTENDER_URL_PLACEHOLDER: extender_url,
        EXTENDER_HTTP1_URL_PLACEHOLDER: http1_url or extender_url,
    }
    for extender in config.get("extenders") or []:
        url = urls.get(extender.get("urlPrefix"))
        if url is not None:
            extender["urlPrefix"] = url
            if tls is not None:
                extender["enableHTTPS"] = True
                extender["tlsConfig"] = {
                    "caFile": str(tls.ca),
                    "certFile": str(tls.client_cert),
                    "keyFile": str(tls.client_key),
                }


def all_nodes_scheduler_name(name: str) -> str:
    """The profile that the marker policy moves the extender's pods to (split scope): it looks
    at every feasible node (scheduler-config/extender-split.yaml)."""
    return f"{name}{ALL_NODES_SUFFIX}"


def scheduler_name(config: Mapping[str, Any]) -> str:
    """The schedulerName pods should use: default-scheduler unless the profiles lack it."""
    names = [p.get("schedulerName", DEFAULT_SCHEDULER_NAME) for p in config.get("profiles") or []]
    return DEFAULT_SCHEDULER_NAME if not names or DEFAULT_SCHEDULER_NAME in names else names[0]


def dump_yaml(config: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(config), sort_keys=False)


def etcd_command(binary: Path, *, data_dir: Path, client_port: int, peer_port: int) -> list[str]:
    client = f"http://127.0.0.1:{client_port}"
    peer = f"http://127.0.0.1:{peer_port}"
    return [
        str(binary),
        "--name=escher",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=escher={peer}",
        # A throw-away cluster: durability buys nothing, fsync costs node-creation time.
        "--unsafe-no-fsync",
        # One member elects itself after an election timeout (1 s by default, the bulk of its
        # start-up); with no peers there is no one to lose an election to, so shorten it. The
        # raft tick is the heartbeat: at 10 ms an idle etcd used 3.1% of a core, at 20 ms (the
        # shortest the 100 ms timeout allows, 5 ticks) 2%; ready in 0.1 s either way.
        "--heartbeat-interval=20",
        "--election-timeout=100",
    ]


def apiserver_command(
    binary: Path,
    *,
    etcd_port: int,
    port: int,
    cert_dir: Path,
    tokens: Path,
    sa_key: Path,
    feature_gates: Mapping[str, bool],
    runtime_config: Mapping[str, str],
    audit: tuple[Path, Path] | None = None,
) -> list[str]:
    """kube-apiserver's command line; `audit` is (policy file, log file) to write an audit
    log as JSON lines, unrotated (a run's log is read whole afterwards)."""
    command = [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{etcd_port}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        f"--token-auth-file={tokens}",
        "--authorization-mode=RBAC",
        # No controller-manager (but for mode dra's two controllers): TaintNodesByCondition
        # would leave every node not-ready-tainted,
        # ServiceAccount would refuse pods for want of a default service account.
        "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
        "--service-cluster-ip-range=10.0.0.0/24",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={sa_key}",
        f"--service-account-signing-key-file={sa_key}",
    ]
    if feature_gates:
        command.append(f"--feature-gates={format_feature_gates(feature_gates)}")
    if runtime_config:
        command.append(
            "--runtime-config=" + ",".join(f"{k}={v}" for k, v in sorted(runtime_config.items()))
        )
    if audit:
        policy, log = audit
        command += [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={log}",
            "--audit-log-format=json",
            "--audit-log-maxsize=0",
        ]
    return command


# kube-scheduling-perf's audit policy (its audit-policy.yaml, the fork's with pods/status):
# pods' creates, bindings and status writes in full, every other request's metadata.
AUDIT_POLICY: Final = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitManagedFields: true
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: RequestResponse
  resources:
  - group: ""
    resources: [pods, pods/binding, pods/status]
  - group: batch
    resources: [jobs, jobs/status]
  verbs: [create, patch, update, delete]
- level: Metadata
"""


# kube-scheduler's HTTP/2 health check of its connections (k8s.io/apimachinery's
# SetTransportDefaults reads these), as deploy/base/scheduler.yaml sets it: a connection on
# which nothing arrived for 5 s is pinged, and closed if the ping is not answered in 3 s. The
# defaults, 30 s and 15 s, keep the verbs' connection to a paused or cut-off extender leader
# for 45 s, each call on it waiting out httpTimeout; with these a new connection reaches the
# new leader within 8 s (docs/operations.md, "Replicas and failover").
SCHEDULER_ENV = {"HTTP2_READ_IDLE_TIMEOUT_SECONDS": "5", "HTTP2_PING_TIMEOUT_SECONDS": "3"}


def scheduler_command(
    binary: Path, *, config: Path, port: int, feature_gates: Mapping[str, bool]
) -> list[str]:
    command = [
        str(binary),
        f"--config={config}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        # Benchmarks read kube-scheduler's own metrics; it listens on loopback only, and has
        # no delegated authorization to check a caller against.
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
    ]
    if feature_gates:
        command.append(f"--feature-gates={format_feature_gates(feature_gates)}")
    return command


def controller_manager_command(
    binary: Path,
    *,
    kubeconfig: Path,
    client_qps: float | None = None,
    client_burst: int | None = None,
) -> list[str]:
    """kube-controller-manager with only what mode dra needs: the garbage collector and the
    resource-claim controller (ResourceClaims of ended and deleted pods). No listener: it
    serves nothing the cluster waits for; its controllers start within seconds. With
    `client_qps` / `client_burst` (ClusterSpec's: the budget kube-scheduler and the extender
    get), its API client has the same budget instead of its default 20 / 30, so no token
    bucket of its own paces the claims' clean-up in a benchmark."""
    command = [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        "--controllers=garbage-collector-controller,resourceclaim-controller",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        "--secure-port=0",
    ]
    if client_qps is not None:
        command.append(f"--kube-api-qps={client_qps:g}")
    if client_burst is not None:
        command.append(f"--kube-api-burst={client_burst}")
    return command


def kwok_command(binary: Path, *, kubeconfig: Path, stages: Path) -> list[str]:
    """The kwok controller as the fake nodes' kubelets: it manages the nodes carrying
    fakenodes.FAKE_NODE_ANNOTATION and plays `stages`. No node leases (no controller-manager
    reads them); no --node-port or --server-address, so it serves no kubelet API (nor a health
    endpoint: cluster.up knows it is ready once it has taken the nodes over)."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}=true",
        "--node-lease-duration-seconds=0",
        f"--config={stages}",
    ]


def extender_command(
    *,
    port: int,
    kubeconfig: Path,
    mode: Mode,
    token: str,
    domain: str = DEFAULT_RESOURCE_DOMAIN,
    kube_qps: float | None = None,
    kube_burst: int | None = None,
    identity: str | None = None,
    verbs_port: int | None = None,
    verbs_tls: Pki | None = None,
    verbs_http2: bool = True,
    verbs_http1_port: int | None = None,
) -> list[str]:
    """The extender service, run with this interpreter so it uses the same installation.
    With `identity`, as one of several replicas: it competes for the Lease
    LEASE_NAMESPACE/LEASE_NAME under that name (LeaseTimes.environment gives the durations).
    With `verbs_port`, kube-scheduler's verbs are served there only: with `verbs_tls` over TLS,
    to the holder of the client certificate the CA signed, else over plain HTTP on loopback
    (deploy/'s sidecar layout); the policy API stays plain HTTP. Over TLS the verbs speak
    HTTP/2 unless `verbs_http2` is False, and with `verbs_http1_port` over HTTP/1.1 there too.
    With -P: `-m` would put the working directory first on sys.path, and the extender would
    run whatever code is there (another checkout's) instead of this installation's."""
    command = [
        sys.executable, "-P", "-m", "extender", "serve",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--kubeconfig", str(kubeconfig),
        "--mode", mode,
        "--token", token,
        "--resource-domain", domain,
    ]  # fmt: skip
    if kube_qps is not None:
        command += ["--kube-qps", f"{kube_qps:g}"]
    if kube_burst is not None:
        command += ["--kube-burst", str(kube_burst)]
    if identity is not None:
        command += [
            "--leader-elect",
            "--identity", identity,
            "--lease-name", LEASE_NAME,
            "--lease-namespace", LEASE_NAMESPACE,
        ]  # fmt: skip
    if verbs_port is not None:
        command += ["--verbs-port", str(verbs_port)]
    if verbs_port is not None and verbs_tls is None:
        command += ["--verbs-plain"]  # on --host, loopback
    if verbs_port is not None and verbs_tls is not None:
        command += [
            "--verbs-tls-cert-file", str(verbs_tls.server_cert),
            "--verbs-tls-key-file", str(verbs_tls.server_key),
            "--verbs-client-ca-file", str(verbs_tls.ca),
        ]  # fmt: skip
        if not verbs_http2:
            command += ["--no-verbs-http2"]
        if verbs_http1_port is not None:
            command += ["--verbs-http1-port", str(verbs_http1_port)]
    return command


def service_proxy_command(
    *, ports: Sequence[int], backends: Sequence[Sequence[int]], poll: float
) -> list[str]:
    """The service proxy (escher_harness.localcluster.serviceproxy) on `ports`, forwarding
    each new connection to one of the replicas whose /readyz answers 200 (on its first port),
    looked at every `poll` seconds: `backends` gives each replica's port for each of `ports`."""
    command = [
        sys.executable, "-m", "escher_harness.localcluster.serviceproxy",
        "--poll", f"{poll:g}",
    ]  # fmt: skip
    for port in ports:
        command += ["--port", str(port)]
    for backend in backends:
        command += ["--backend", "127.0.0.1:" + ",".join(map(str, backend))]
    return command


def format_feature_gates(gates: Mapping[str, bool]) -> str:
    return ",".join(f"{name}={str(on).lower()}" for name, on in sorted(gates.items()))


def _template(name: str) -> dict[str, Any]:
    path = scheduler_config_dir() / f"{name}.yaml"
    try:
        text = path.read_text()
    except OSError as e:
        raise ClusterError(
            f"cannot read the {name} scheduler config template {path}: {e}"
        ) from None
    return parse_scheduler_config(text, str(path))


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())
