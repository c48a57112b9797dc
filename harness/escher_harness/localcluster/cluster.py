"""The Python API of the local control plane: `up`, `down`, `status`, `load`.

Called by the CLI (commands), the pytest fixtures (pytest_plugin), e2e tests and benchmarks.
`up` starts etcd, kube-apiserver, the objects of the spec's manifests (e.g. CRDs), kwok (the
fake nodes' kubelets, unless spec.kwok is off), the fake nodes, the extender service (modes
extender and pure; with spec.replicas > 1, that many replicas electing a leader behind the
service proxy) and kube-scheduler, in that order, each once the previous one is ready
(kwok: once it has taken every fake node over); it records every process in the cluster
directory as soon as it is started, so `down` can stop a cluster whose `up` failed or was
interrupted. On any failure `up` stops everything it started itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import urllib3
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import FailToCreateError

from escher_harness.kubeclient import api_client
from escher_harness.localcluster import config, gangate, kwok, markers
from escher_harness.localcluster.binaries import Binaries, find_binaries
from escher_harness.localcluster.clusterdir import ClusterDir, State, write_json
from escher_harness.localcluster.config import (
    DEFAULT_RESOURCE_DOMAIN,
    MODES,
    SCOPES,
    SERVICE_PROXY,
    VERBS,
    VERBS_HTTP1,
    LeaseTimes,
    Mode,
    Scope,
    is_replica,
    replica_name,
)
from escher_harness.localcluster.cpus import CpuSplit
from escher_harness.localcluster.errors import ClusterError
from escher_harness.localcluster.fakenodes import NodeShape, Topology, create_nodes
from escher_harness.localcluster.health import http_client, probe, start_failure, wait_ready
from escher_harness.localcluster.manifests import (
    Manifest,
    ManifestError,
    create_manifests,
    in_domain,
    load_manifests,
)
from escher_harness.localcluster.paths import podgroup_crd, policy_crds
from escher_harness.localcluster.pki import make_pki
from escher_harness.localcluster.ports import allocate_ports, release_claims
from escher_harness.localcluster.processes import (
    ProcessRecord,
    is_running,
    rss_bytes,
    spawn,
    stop,
)
from extender.core.pod import Keys
from extender.gang.args import GangArgs
from extender.scheduling import profile

_EXTENDED_RESOURCE = re.compile(
    r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


@dataclass(frozen=True)
class ClusterSpec:
    """What to start. Ports left None are chosen free; fixed ones are checked first."""

    dir: Path
    nodes: int = 3
    mode: Mode = "none"
    node_cpu: str = "32"
    node_memory: str = "128Gi"
    node_pods: str = "110"
    node_labels: Mapping[str, str] = field(default_factory=dict)
    # Label the nodes into zones, blocks and racks (escher_harness.localcluster.fakenodes).
    node_topology: Topology | None = None
    # Extended resources every node advertises, e.g. {"example.com/gpu": "4"}.
    node_resources: Mapping[str, str] = field(default_factory=dict)
    # A KubeSchedulerConfiguration to run instead of the mode's; clientConnection.kubeconfig
    # and leaderElection are overridden, an urlPrefix of "${EXTENDER_URL}" is filled in.
    scheduler_config: Path | None = None
    resource_domain: str = DEFAULT_RESOURCE_DOMAIN
    # Given to kube-apiserver and kube-scheduler (feature gates) / kube-apiserver (runtime
    # config), e.g. {"GenericWorkload": True} and {"scheduling.k8s.io/v1alpha1": "true"}.
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    runtime_config: Mapping[str, str] = field(default_factory=dict)
    # kube-scheduler's gates, when they must differ from kube-apiserver's (None: the same).
    scheduler_feature_gates: Mapping[str, bool] | None = None
    # Serve the objects users declare gangs with (extender.gang.declarations): the native
    # scheduling.k8s.io/v1beta1 PodGroup (kube-apiserver's GenericWorkload gate and runtime
    # config) and scheduler-plugins' PodGroup CRD (from `make peers`). kube-scheduler runs
    # with GenericWorkload off, so that its own GangScheduling plugin stays out of the
    # extender's way (docs/gangs.md, "Declaring a gang"), unless scheduler_feature_gates
    # says otherwise.
    gang_declarations: bool = False
    # A kube-scheduler to run instead of the one found with etcd and kube-apiserver, e.g. the
    # benchmark's peer <cache>/bin/kube-scheduler-plugins (hack/build-peers.sh).
    scheduler_binary: Path | None = None
    # YAML files whose objects (e.g. a peer scheduler's CRDs) are created once kube-apiserver
    # is ready and before kube-scheduler starts; CRDs are waited for until Established.
    manifests: tuple[Path, ...] = ()
    etcd_port: int | None = None
    apiserver_port: int | None = None
    scheduler_port: int | None = None
    extender_port: int | None = None
    # Run kwok as the nodes' kubelets: bound pods go Running, and Succeeded after their
    # harness.escher.io/run-time (escher_harness.localcluster.kwok). Off: they stay Pending.
    kwok: bool = True
    # The API budget of kube-scheduler's client (clientConnection.qps and burst), of the
    # extender's own client and (mode dra) of kube-controller-manager's; None keeps their
    # defaults (kube-scheduler's 50 and 100). Benchmarks give
    # every scheduler and the extender one high figure, so no token bucket decides a result.
    client_qps: float | None = None
    client_burst: int | None = None
    # percentageOfNodesToScore of the scheduler (None: the mode's template, else the default).
    percentage_of_nodes_to_score: int | None = None
    # Extender replicas (modes extender and pure). 1: one extender, no leader election. More:
    # components extender-0, extender-1, ... run with --leader-elect on the Lease
    # kube-system/escher-extender with these times, behind the service proxy (extender-proxy,
    # escher_harness.localcluster.serviceproxy), which extender_url and kube-scheduler use.
    replicas: int = 1
    lease: LeaseTimes = field(default_factory=LeaseTimes)
    # In extender mode kube-scheduler calls the verbs over mutual TLS, as deploy/ does. False:
    # over plain HTTP on a listener of their own on loopback, as deploy/'s sidecar overlay
    # runs them (the extender a container of kube-scheduler's pod).
    verbs_tls: bool = True
    # ... and over mutual TLS the verbs' listener speaks HTTP/2 (hypercorn), as deploy/ runs
    # it. False: HTTP/1.1 only (uvicorn, --no-verbs-http2), to measure what HTTP/2 costs the
    # exchanges that hold no call open (prioritize).
    verbs_http2: bool = True
    # ... and, split, beside that HTTP/2 listener an HTTP/1.1 one (--verbs-http1-port) that
    # the filter and prioritize entries call, as deploy/ runs them. False: every verb over
    # HTTP/2, as before, to measure what the HTTP/1.1 listener gives.
    verbs_http1: bool = True
    # In extender mode, which pods kube-scheduler sends the extender. "split" (deploy/'s
    # extender overlay): each exchange only for the pods marked for it,
    # scheduler-config/extender-split.yaml and deploy's marker admission policy
    # (escher_harness.localcluster.markers) marking gang members and pods with a preference at
    # creation. "every-pod": every pod every exchange (scheduler-config/extender.yaml), as
    # before the split; the benchmarks compare it, and e2e tests of the verbs use it.
    scope: Scope = "split"
    # In extender mode, the adaptive gang gate as deploy/ runs it: deploy's gang-gate
    # admission policy (escher_harness.localcluster.gangate), and the extender writing its
    # switch, so that gang members are held at the gang gate while gangs wait for room.
    gang_gate: bool = False
    # Pin kube-scheduler and the extender to CPUs of their own, apart from the rest of the
    # cluster (escher_harness.localcluster.cpus). None: every process on every CPU.
    cpu_split: CpuSplit | None = None
    # The extender's CPU share (its replicas' too): its session's autogroup nice, as a pod's
    # CPU request sets its cgroup's weight (processes.set_autogroup_nice). 0: the same share
    # as every other process; -5: about 3x; no effect without an extender.
    extender_nice: int = 0
    # How often the service proxy asks each replica's /readyz.
    proxy_poll: float = 0.2
    # Budget in seconds for all components to become ready (node creation not included; kwok
    # has the same budget again, from the nodes' creation, to take them over).
    timeout: float = 120.0

    @property
    def split(self) -> bool:
        """Whether kube-scheduler sends each exchange only to the pods marked for it."""
        return self.mode == "extender" and self.scope == "split"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ClusterError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.nodes < 0:
            raise ClusterError(f"nodes must be >= 0, not {self.nodes}")
        if self.timeout <= 0:
            raise ClusterError(f"timeout must be > 0, not {self.timeout}")
        if self.replicas < 1:
            raise ClusterError(f"replicas must be >= 1, not {self.replicas}")
        if self.replicas > 1 and self.mode == "none":
            raise ClusterError("replicas are extender replicas: they need mode extender or pure")
        if self.scope not in SCOPES:
            raise ClusterError(f"scope {self.scope!r} is not one of {', '.join(SCOPES)}")
        if self.scope != "split" and self.mode != "extender":
            raise ClusterError(
                f"scope {self.scope} is a way of calling the extender: it needs mode extender"
            )
        if not (self.verbs_tls and self.verbs_http2 and self.verbs_http1) and (
            self.mode != "extender"
        ):
            raise ClusterError(
                "verbs_tls, verbs_http2 and verbs_http1 are the verbs' listeners: mode extender"
            )
        if self.gang_gate and self.mode != "extender":
            raise ClusterError("gang_gate holds gangs for the extender: it needs mode extender")
        if not -20 <= self.extender_nice <= 19:
            raise ClusterError(f"extender_nice must be in -20..19, not {self.extender_nice}")
        if self.proxy_poll <= 0:
            raise ClusterError(f"proxy_poll must be > 0, not {self.proxy_poll}")
        if self.client_qps is not None and self.client_qps <= 0:
            raise ClusterError(f"client_qps must be > 0, not {self.client_qps}")
        if self.client_burst is not None and self.client_burst < 1:
            raise ClusterError(f"client_burst must be >= 1, not {self.client_burst}")
        pct = self.percentage_of_nodes_to_score
        if pct is not None and not 0 <= pct <= 100:
            raise ClusterError(f"percentage_of_nodes_to_score must be in 0..100, not {pct}")
        for name, quantity in self.node_resources.items():
            if not _EXTENDED_RESOURCE.match(name) or "kubernetes.io/" in name:
                raise ClusterError(
                    f"node resource {name!r} is not an extended resource name "
                    "(<domain>/<name>, outside kubernetes.io)"
                )
            if not str(quantity).isdigit():
                raise ClusterError(
                    f"node resource {name}={quantity!r}: extended resources are whole numbers"
                )


@dataclass(frozen=True)
class ClusterInfo:
    """A running cluster, as `up` returns it and cluster.json stores it."""

    dir: Path
    mode: Mode
    kubeconfig: Path
    apiserver: str  # https://127.0.0.1:<port>
    scheduler_name: str  # the schedulerName pods use ("default-scheduler")
    nodes: tuple[str, ...]
    resource_domain: str
    ports: Mapping[str, int]  # etcd, etcd_peer, apiserver, scheduler[, extender]
    processes: tuple[ProcessRecord, ...]
    paths: Mapping[str, Path]  # etcd_data, cert_dir, logs, scheduler_config, tokens, sa_key
    extender_url: str | None  # modes extender and pure
    token: str | None  # bearer token of the extender's policy API (modes extender and pure)
    ready_seconds: float  # from the call of `up` to the whole cluster being ready

    @property
    def pids(self) -> dict[str, int]:
        return {p.name: p.pid for p in self.processes}

    @property
    def replica_urls(self) -> dict[str, str]:
        """Each extender replica's own URL, by component name (empty with one extender)."""
        ports = self.ports.items()
        return {name: f"http://127.0.0.1:{port}" for name, port in ports if is_replica(name)}

    def to_json(self) -> dict[str, Any]:
        return {
            "dir": str(self.dir),
            "mode": self.mode,
            "kubeconfig": str(self.kubeconfig),
            "apiserver": self.apiserver,
            "scheduler_name": self.scheduler_name,
            "nodes": list(self.nodes),
            "resource_domain": self.resource_domain,
            "ports": dict(self.ports),
            "pids": self.pids,
            "processes": [p.to_json() for p in self.processes],
            "paths": {k: str(v) for k, v in self.paths.items()},
            "extender_url": self.extender_url,
            "token": self.token,
            "ready_seconds": self.ready_seconds,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClusterInfo:
        return cls(
            dir=Path(data["dir"]),
            mode=data["mode"],
            kubeconfig=Path(data["kubeconfig"]),
            apiserver=data["apiserver"],
            scheduler_name=data["scheduler_name"],
            nodes=tuple(data["nodes"]),
            resource_domain=data["resource_domain"],
            ports=dict(data["ports"]),
            processes=tuple(ProcessRecord.from_json(p) for p in data["processes"]),
            paths={k: Path(v) for k, v in data["paths"].items()},
            extender_url=data["extender_url"],
            token=data["token"],
            ready_seconds=float(data["ready_seconds"]),
        )


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    pid: int
    alive: bool
    healthy: bool
    detail: str | None  # why it is not healthy
    rss_bytes: int
    port: int
    health_url: str
    log: Path
    # An extender replica's role, from its /readyz: "leader" or "follower" (None otherwise).
    role: str | None = None


@dataclass(frozen=True)
class ClusterStatus:
    dir: Path
    ready: bool  # `up` finished (cluster.json exists)
    components: tuple[ComponentStatus, ...]

    @property
    def healthy(self) -> bool:
        return self.ready and all(c.healthy for c in self.components)

    @property
    def total_rss_bytes(self) -> int:
        return sum(c.rss_bytes for c in self.components)

    def to_json(self) -> dict[str, Any]:
        return {
            "dir": str(self.dir),
            "ready": self.ready,
            "healthy": self.healthy,
            "total_rss_bytes": self.total_rss_bytes,
            "components": [
                {
                    "name": c.name,
                    "pid": c.pid,
                    "alive": c.alive,
                    "healthy": c.healthy,
                    "detail": c.detail,
                    "rss_bytes": c.rss_bytes,
                    "port": c.port,
                    "health_url": c.health_url,
                    "log": str(c.log),
                    "role": c.role,
                }
                for c in self.components
            ],
        }


def up(spec: ClusterSpec, *, progress: Callable[[str], None] | None = None) -> ClusterInfo:
    """Start a cluster in spec.dir and return once every component is ready.

    Raises ClusterError (MissingBinaryError for a missing binary) with nothing left running;
    the logs of a failed start are kept in <dir>/logs. `progress` receives one-line messages.
    """
    started = time.monotonic()
    binaries = find_binaries(kwok=spec.kwok, controller_manager=spec.mode == "dra")
    if spec.scheduler_binary is not None:
        binaries = dataclasses.replace(
            binaries, kube_scheduler=_executable(spec.scheduler_binary, "scheduler_binary")
        )
    user_config = (
        config.load_scheduler_config(spec.scheduler_config) if spec.scheduler_config else None
    )
    try:
        manifests = load_manifests(spec.manifests)
    except ManifestError as e:
        raise ClusterError(str(e)) from None
    with_extender = spec.mode != "none"
    replicas = spec.replicas if with_extender and spec.replicas > 1 else 0
    # In extender mode kube-scheduler calls the verbs on a listener of their own, over mutual
    # TLS as deploy/ runs it (or plain HTTP, as its sidecar overlay does); the policy API stays
    # plain HTTP on loopback.
    verbs = spec.mode == "extender"
    # The filter and prioritize entries' HTTP/1.1 listener beside the HTTP/2 one (split only:
    # every-pod's template has one entry for every verb).
    http1 = verbs and spec.split and spec.verbs_tls and spec.verbs_http2 and spec.verbs_http1
    cdir = ClusterDir(spec.dir.absolute())
    ports = allocate_ports(
        {
            "etcd": spec.etcd_port,
            "etcd_peer": None,
            "apiserver": spec.apiserver_port,
            "scheduler": spec.scheduler_port,
            # With replicas, "extender" and "verbs" are the service proxy's: the one address
            # of them all.
            **({"extender": spec.extender_port} if with_extender else {}),
            **({VERBS: None} if verbs else {}),
            **({VERBS_HTTP1: None} if http1 else {}),
            **{replica_name(i): None for i in range(replicas)},
            **{f"{VERBS}-{i}": None for i in range(replicas if verbs else 0)},
            **{f"{VERBS_HTTP1}-{i}": None for i in range(replicas if http1 else 0)},
        },
        owner=cdir.state_file,
    )
    try:
        created_dir = _prepare_dir(cdir)
    except BaseException:
        # Only this call's: the directory may hold a running cluster that claimed its own.
        release_claims(cdir.state_file, ports.values())
        raise
    try:
        return _start(
            spec, cdir, created_dir, binaries, user_config, manifests, ports, started, progress
        )
    except BaseException:
        down(cdir.root, keep_logs=True)
        raise


def down(dir: Path, *, keep_logs: bool = False) -> None:
    """Stop every process `up` started in `dir` and remove what it wrote there.

    Idempotent; works on a half-started directory; a directory `up` never used is left as is.
    """
    cdir = ClusterDir(dir.absolute())
    state = cdir.read_state()
    if state is None:
        return
    # One at a time, clients first: etcd and the apiserver wait for their clients to go. The
    # apiserver is killed: its graceful termination spends a second on HTTP/2 GOAWAYs to
    # clients already stopped, and drains nothing that outlives the directory.
    for record in reversed(state.processes):
        stop(record, first=signal.SIGKILL if record.name == "kube-apiserver" else signal.SIGTERM)
    cdir.remove(keep_logs=keep_logs, created_dir=state.created_dir)
    release_claims(cdir.state_file)


def restart_component(
    dir: Path,
    name: str,
    *,
    kill_signal: signal.Signals = signal.SIGTERM,
    timeout: float = 60.0,
) -> ClusterInfo:
    """Stop one component with `kill_signal` (SIGKILL: a crash), start it again with the same
    command line and port, and return once it is ready. Its earlier log is kept as
    `<name>.log.1`. For restart and failure tests."""
    stop_component(dir, name, kill_signal=kill_signal)
    return start_component(dir, name, timeout=timeout)


def stop_component(dir: Path, name: str, *, kill_signal: signal.Signals = signal.SIGTERM) -> None:
    """Stop one component with `kill_signal`; `start_component` starts it again. Benchmarks
    stop kube-scheduler while they queue pods, so pod creation does not pace scheduling."""
    stop(_component(ClusterDir(dir.absolute()), name)[1], first=kill_signal)


def start_component(dir: Path, name: str, *, timeout: float = 60.0) -> ClusterInfo:
    """Start a stopped component again with the same command line and port, and return once it
    is ready. Its earlier log is kept as `<name>.log.1`."""
    cdir = ClusterDir(dir.absolute())
    state, old = _component(cdir, name)
    if is_running(old):
        raise ClusterError(f"{name} (pid {old.pid}) is still running")
    info = load(cdir.root)
    if old.log.exists():
        old.log.replace(old.log.with_name(old.log.name + ".1"))
    new = spawn(
        name,
        list(old.argv),
        log=old.log,
        port=old.port,
        health_url=old.health_url,
        health_token=old.health_token,
        env=_environment(cdir),
        extra_env=old.env,
        cpus=frozenset(old.cpus) or None,
        nice=old.nice,
    )
    records = tuple(new if p.name == name else p for p in state.processes)
    cdir.write_state(State(created_dir=state.created_dir, processes=records))
    info = dataclasses.replace(info, processes=records)
    write_json(cdir.cluster_file, info.to_json())
    wait_ready(new, deadline=time.monotonic() + timeout, timeout=timeout)
    return info


def _component(cdir: ClusterDir, name: str) -> tuple[State, ProcessRecord]:
    state = cdir.read_state()
    record = next((p for p in state.processes if p.name == name), None) if state else None
    if state is None or record is None:
        raise ClusterError(f"no component {name!r} in the cluster in {cdir.root}")
    return state, record


def status(dir: Path) -> ClusterStatus:
    """Liveness, health and memory of each component `up` started in `dir`."""
    cdir = ClusterDir(dir.absolute())
    state = cdir.read_state()
    if state is None:
        raise ClusterError(f"no cluster in {cdir.root} ({cdir.state_file.name} does not exist)")
    components = []
    with http_client(timeout=2.0) as client:
        for record in state.processes:
            alive = is_running(record)
            detail = probe(client, record) if alive else "not running"
            role = None
            if is_replica(record.name) and alive:
                role = replica_role(client, f"http://127.0.0.1:{record.port}")
            components.append(
                ComponentStatus(
                    name=record.name,
                    pid=record.pid,
                    alive=alive,
                    healthy=detail is None,
                    detail=detail,
                    rss_bytes=rss_bytes(record),
                    port=record.port,
                    health_url=record.health_url,
                    log=record.log,
                    role=role,
                )
            )
    return ClusterStatus(
        dir=cdir.root, ready=cdir.cluster_file.exists(), components=tuple(components)
    )


def replica_role(client: httpx.Client, url: str) -> str:
    """ "leader" when the replica at `url` is ready (only the leader is), else "follower"
    (or "unknown" when it does not answer, e.g. paused)."""
    try:
        answer = client.get(f"{url}/readyz")
    except httpx.HTTPError:
        return "unknown"
    return "leader" if answer.status_code == 200 else "follower"


def load(dir: Path) -> ClusterInfo:
    """The ClusterInfo of the running cluster in `dir` (from its cluster.json)."""
    path = ClusterDir(dir.absolute()).cluster_file
    try:
        return ClusterInfo.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        raise ClusterError(f"no ready cluster in {dir} ({path.name} does not exist)") from None
    except (OSError, ValueError, KeyError) as e:
        raise ClusterError(f"cannot read {path}: {e!r}") from None


def _prepare_dir(cdir: ClusterDir) -> bool:
    """Create or reuse the directory; True when it was created. Refuses a running cluster."""
    existed = cdir.root.exists()
    try:
        cdir.root.mkdir(parents=True, exist_ok=True)
        probe_file = cdir.root / ".escher-write-test"
        probe_file.write_text("")
        probe_file.unlink()
    except OSError as e:
        raise ClusterError(
            f"cannot use {cdir.root} as the cluster directory: {e.strerror or e}"
        ) from None
    state = cdir.read_state()
    if state is not None:
        running = [p.name for p in state.processes if is_running(p)]
        if running:
            raise ClusterError(
                f"a cluster is already running in {cdir.root} ({', '.join(running)}); "
                f"stop it first: escher-extender cluster down --dir {cdir.root}"
            )
        cdir.remove(keep_logs=False, created_dir=False)  # leftovers of a crashed run
    created = not existed or (state is not None and state.created_dir)
    cdir.write_state(State(created_dir=created))
    return created


def _start(
    spec: ClusterSpec,
    cdir: ClusterDir,
    created_dir: bool,
    binaries: Binaries,
    user_config: Mapping[str, Any] | None,
    manifests: tuple[Manifest, ...],
    ports: Mapping[str, int],
    started: float,
    progress: Callable[[str], None] | None,
) -> ClusterInfo:
    say = progress or (lambda _message: None)
    deadline = started + spec.timeout
    admin_token = secrets.token_hex(16)
    apiserver_url = f"https://127.0.0.1:{ports['apiserver']}"
    extender_url = f"http://127.0.0.1:{ports['extender']}" if "extender" in ports else None
    policy_token = secrets.token_hex(16) if extender_url else None
    verbs_tls = make_pki(cdir.cert_dir / "extender") if VERBS in ports and spec.verbs_tls else None
    verbs_url = None
    if VERBS in ports:
        verbs_url = f"{'https' if verbs_tls else 'http'}://127.0.0.1:{ports[VERBS]}"
    http1_url = f"https://127.0.0.1:{ports[VERBS_HTTP1]}" if VERBS_HTTP1 in ports else None

    scheduler_config = config.scheduler_config(
        spec.mode,
        user_config=user_config,
        kubeconfig=cdir.kubeconfig,
        extender_url=verbs_url or extender_url,
        client_qps=spec.client_qps,
        client_burst=spec.client_burst,
        percentage_of_nodes_to_score=spec.percentage_of_nodes_to_score,
        verbs_tls=verbs_tls,
        split=spec.resource_domain if spec.split else None,
        http1_url=http1_url,
    )
    if spec.mode == "extender":
        # As deploy/'s scheduler checks its configuration before it starts (a user's file
        # above all): said, not refused, so an experiment can still run.
        keys = Keys.for_domain(spec.resource_domain)
        wait = GangArgs().wait_seconds
        for problem in profile.problems(scheduler_config, keys, wait):
            say(f"warning: kube-scheduler's configuration: {problem}")
    _write_private(cdir.tokens, config.render_tokens_csv(admin_token))
    _write_private(cdir.kubeconfig, config.render_kubeconfig(apiserver_url, admin_token))
    cdir.scheduler_config.write_text(config.dump_yaml(scheduler_config))
    _generate_rsa_key(cdir.sa_key)
    cdir.cert_dir.mkdir(exist_ok=True)  # make_pki may have made it
    cdir.logs.mkdir(exist_ok=True)

    records: list[ProcessRecord] = []

    environment = _environment(cdir)
    apiserver_gates, runtime_config, scheduler_gates = _gates(spec)

    def launch(name: str, argv: list[str], port: int, health_url: str, **kw: Any) -> ProcessRecord:
        # An interrupt between starting a process and recording it would orphan it: the
        # clean-up only stops what the state file names. So Ctrl-C / SIGTERM wait until then.
        with _interrupts_deferred():
            record = spawn(
                name,
                argv,
                log=cdir.log(name),
                port=port,
                health_url=health_url,
                env=environment,
                cpus=spec.cpu_split.of(name) if spec.cpu_split else None,
                nice=spec.extender_nice if name == "extender" or is_replica(name) else 0,
                **kw,
            )
            records.append(record)
            cdir.write_state(State(created_dir=created_dir, processes=tuple(records)))
        if health_url:
            wait_ready(record, deadline=deadline, timeout=spec.timeout)
            say(f"{name} ready ({time.monotonic() - started:.1f}s)")
        return record

    launch(
        "etcd",
        config.etcd_command(
            binaries.etcd,
            data_dir=cdir.etcd_data,
            client_port=ports["etcd"],
            peer_port=ports["etcd_peer"],
        ),
        ports["etcd"],
        f"http://127.0.0.1:{ports['etcd']}/health",
    )
    launch(
        "kube-apiserver",
        config.apiserver_command(
            binaries.kube_apiserver,
            etcd_port=ports["etcd"],
            port=ports["apiserver"],
            cert_dir=cdir.cert_dir,
            tokens=cdir.tokens,
            sa_key=cdir.sa_key,
            feature_gates=apiserver_gates,
            runtime_config=runtime_config,
        ),
        ports["apiserver"],
        f"{apiserver_url}/readyz",
        health_token=admin_token,
    )
    if binaries.kube_controller_manager is not None:
        # Mode dra: kube-scheduler creates a ResourceClaim per pod; the resource-claim
        # controller releases it when the pod ends and the garbage collector deletes it with
        # the pod. Without them a deleted pod's device stays allocated for ever.
        launch(
            "kube-controller-manager",
            config.controller_manager_command(
                binaries.kube_controller_manager,
                kubeconfig=cdir.kubeconfig,
                client_qps=spec.client_qps,
                client_burst=spec.client_burst,
            ),
            0,
            "",
        )
    if extender_url:
        # The policies' CRDs, served wherever the service runs (deploy/ installs them too).
        crds = in_domain(load_manifests(policy_crds()), spec.resource_domain)
        manifests = (*crds, *manifests)
    if spec.gang_declarations:
        crd = podgroup_crd()
        if not crd.is_file():
            raise ClusterError(f"{crd} is missing: run `make peers` (gang_declarations needs it)")
        manifests = (*manifests, *load_manifests((crd,)))
    if spec.gang_gate:
        manifests = (*manifests, *gangate.manifests(config.scheduler_name(scheduler_config)))
    if spec.split:
        name = config.scheduler_name(scheduler_config)
        manifests = (*manifests, *markers.manifests(name, spec.resource_domain))
    if manifests:
        _create_manifest_objects(cdir.kubeconfig, manifests, deadline)
        say(f"{len(manifests)} manifest objects created ({time.monotonic() - started:.1f}s)")
    # kwok starts before the nodes are created and takes them over as they come; it serves
    # no endpoint, so it is ready once every node is taken over.
    kubelets = (
        launch(
            "kwok",
            config.kwok_command(binaries.kwok, kubeconfig=cdir.kubeconfig, stages=kwok.STAGES),
            0,
            "",
        )
        if binaries.kwok
        else None
    )
    # Nodes exist before the extender and kube-scheduler start, so both see them at once.
    nodes = tuple(f"node-{i}" for i in range(spec.nodes))
    _create_nodes(spec, cdir.kubeconfig, nodes, say)
    if kubelets is not None:
        _wait_for_kwok(kubelets, cdir.kubeconfig, nodes, time.monotonic() + spec.timeout)
        say(f"kwok took over {len(nodes)} nodes ({time.monotonic() - started:.1f}s)")

    def extender_argv(
        port: int, verbs_port: int | None, http1_port: int | None, identity: str | None = None
    ) -> list[str]:
        assert policy_token is not None
        return config.extender_command(
            port=port,
            kubeconfig=cdir.kubeconfig,
            mode=spec.mode,
            token=policy_token,
            domain=spec.resource_domain,
            kube_qps=spec.client_qps,
            kube_burst=spec.client_burst,
            identity=identity,
            verbs_port=verbs_port,
            verbs_tls=verbs_tls,
            verbs_http2=spec.verbs_http2,
            verbs_http1_port=http1_port,
        )

    gate_env = {"ESCHER_GANG_GATE_SWITCH": gangate.switch_name()} if spec.gang_gate else {}
    if extender_url and policy_token and spec.replicas == 1:
        launch(
            "extender",
            extender_argv(ports["extender"], ports.get(VERBS), ports.get(VERBS_HTTP1)),
            ports["extender"],
            f"{extender_url}/readyz",
            extra_env=gate_env,
        )
    elif extender_url and policy_token:
        names = [replica_name(i) for i in range(spec.replicas)]
        for i, name in enumerate(names):
            # Alive is what each replica must be: only the leader is ready.
            launch(
                name,
                extender_argv(
                    ports[name],
                    ports.get(f"{VERBS}-{i}"),
                    ports.get(f"{VERBS_HTTP1}-{i}"),
                    identity=name,
                ),
                ports[name],
                f"http://127.0.0.1:{ports[name]}/healthz",
                extra_env={**spec.lease.environment(), **gate_env},
            )
        # Ready once a leader is ready behind it: its /readyz is the leader's.
        service = ["extender", *(p for p in (VERBS, VERBS_HTTP1) if p in ports)]
        launch(
            SERVICE_PROXY,
            config.service_proxy_command(
                ports=[ports[p] for p in service],
                backends=[
                    [ports[n], *(ports[f"{p}-{i}"] for p in service[1:])]
                    for i, n in enumerate(names)
                ],
                poll=spec.proxy_poll,
            ),
            ports["extender"],
            f"{extender_url}/readyz",
        )
    launch(
        "kube-scheduler",
        config.scheduler_command(
            binaries.kube_scheduler,
            config=cdir.scheduler_config,
            port=ports["scheduler"],
            feature_gates=scheduler_gates,
        ),
        ports["scheduler"],
        # /readyz (unlike /healthz) waits for the scheduler's informers and event handlers.
        f"https://127.0.0.1:{ports['scheduler']}/readyz",
        extra_env=config.SCHEDULER_ENV,
    )
    info = ClusterInfo(
        dir=cdir.root,
        mode=spec.mode,
        kubeconfig=cdir.kubeconfig,
        apiserver=apiserver_url,
        scheduler_name=config.scheduler_name(scheduler_config),
        nodes=nodes,
        resource_domain=spec.resource_domain,
        ports=dict(ports),
        processes=tuple(records),
        paths={
            "etcd_data": cdir.etcd_data,
            "cert_dir": cdir.cert_dir,
            "logs": cdir.logs,
            "scheduler_config": cdir.scheduler_config,
            "tokens": cdir.tokens,
            "sa_key": cdir.sa_key,
        },
        extender_url=extender_url,
        token=policy_token,
        ready_seconds=round(time.monotonic() - started, 3),
    )
    write_json(cdir.cluster_file, info.to_json())
    return info


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    deferred = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, deferred)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _create_nodes(
    spec: ClusterSpec, kubeconfig: Path, names: tuple[str, ...], say: Callable[[str], None]
) -> None:
    shape = NodeShape(
        cpu=spec.node_cpu,
        memory=spec.node_memory,
        pods=spec.node_pods,
        labels=spec.node_labels,
        extended_resources=spec.node_resources,
    )
    step = max(1, len(names) // 10)

    def report(done: int, total: int) -> None:
        if total >= 100 and (done % step == 0 or done == total):
            say(f"nodes {done}/{total}")

    workers = 16
    with api_client(kubeconfig, pool_size=workers) as api, _api_errors("creating the fake nodes"):
        create_nodes(
            api, names, shape, workers=workers, progress=report, topology=spec.node_topology
        )


def _wait_for_kwok(
    record: ProcessRecord, kubeconfig: Path, nodes: tuple[str, ...], deadline: float
) -> None:
    with api_client(kubeconfig) as api, _api_errors("watching kwok take the nodes over"):
        kwok.wait_for_nodes(api, nodes, deadline=deadline, alive=lambda: start_failure(record))


def _gates(spec: ClusterSpec) -> tuple[dict[str, bool], dict[str, str], dict[str, bool]]:
    """kube-apiserver's feature gates and runtime config, and kube-scheduler's gates."""
    apiserver = dict(spec.feature_gates)
    runtime = dict(spec.runtime_config)
    scheduler = dict(spec.feature_gates)
    if spec.gang_declarations:
        apiserver.setdefault("GenericWorkload", True)
        runtime.setdefault("scheduling.k8s.io/v1beta1", "true")
        # The API served, the native gang plugin off: one all-or-nothing mechanism, the
        # extender's (docs/gangs.md says what the two did together).
        scheduler["GenericWorkload"] = False
    if spec.scheduler_feature_gates is not None:
        scheduler = dict(spec.scheduler_feature_gates)
    return apiserver, runtime, scheduler


def _environment(cdir: ClusterDir) -> dict[str, str]:
    """Every component's environment: Python output unbuffered (the extender's log is read
    while it runs), and kwok's work directory in the cluster's, so that no ~/.kwok/kwok.yaml
    adds stages of its own."""
    return {**os.environ, "PYTHONUNBUFFERED": "1", "KWOK_WORKDIR": str(cdir.root)}


def _create_manifest_objects(
    kubeconfig: Path, manifests: tuple[Manifest, ...], deadline: float
) -> None:
    with api_client(kubeconfig) as api, _api_errors("creating the manifests' objects"):
        try:
            create_manifests(api, manifests, deadline=deadline)
        except ManifestError as e:
            raise ClusterError(str(e)) from None


@contextlib.contextmanager
def _api_errors(doing: str) -> Iterator[None]:
    """Turn the API's and the transport's errors into a one-line ClusterError saying what
    was being done."""
    try:
        yield
    except ApiException as e:
        raise ClusterError(f"{doing} failed: {e.status} {e.reason}: {e.body}") from None
    except (FailToCreateError, urllib3.exceptions.HTTPError) as e:
        raise ClusterError(f"{doing} failed: {e}") from None


def _executable(path: Path, what: str) -> Path:
    """`path` made absolute, or ClusterError if it is not an executable file."""
    path = path.absolute()
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise ClusterError(f"{what} {path} is not an executable file")
    return path


def _generate_rsa_key(path: Path) -> None:
    """The service-account key: one RSA key serves to verify and to sign tokens."""
    try:
        subprocess.run(
            ["openssl", "genrsa", "-out", str(path), "2048"],
            check=True,
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        raise ClusterError("openssl is needed to generate the service-account key") from None
    except subprocess.CalledProcessError as e:
        raise ClusterError(f"openssl genrsa failed: {e.stderr.strip()}") from None


def _write_private(path: Path, text: str) -> None:
    path.touch(mode=0o600)
    path.write_text(text)
