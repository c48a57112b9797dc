"""The Python API of the local control plane: `up`, `down`, `status`, `load`.

Called by the CLI (commands), the pytest fixtures (pytest_plugin), e2e tests and benchmarks.
`up` checks what it is given (a ClusterSpec, from spec), chooses the ports, then starts etcd,
kube-apiserver, kube-controller-manager (mode dra), the objects of the spec's manifests (e.g.
CRDs), kwok (the fake nodes' kubelets, unless spec.kwok is off), the fake nodes, the extender
service (modes extender and pure; with spec.replicas > 1, that many replicas electing a leader
behind the service proxy) and kube-scheduler, in that order, each once the previous one is
ready (kwok: once it has taken every fake node over), but for the extender, which starts while
kwok takes the nodes over and is waited for after; one step each in startup; every process
is recorded in the cluster directory as soon as it is started, so `down` can stop a cluster
whose `up` failed or was interrupted. On any failure `up` stops everything it started itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from escher_harness.localcluster import config
from escher_harness.localcluster.binaries import Binaries, find_binaries
from escher_harness.localcluster.clusterdir import ClusterDir, State, write_json
from escher_harness.localcluster.config import VERBS, VERBS_HTTP1, Mode, is_replica, replica_name
from escher_harness.localcluster.errors import ClusterError
from escher_harness.localcluster.health import http_client, probe, wait_ready
from escher_harness.localcluster.manifests import Manifest, ManifestError, load_manifests
from escher_harness.localcluster.ports import allocate_ports, release_claims
from escher_harness.localcluster.processes import (
    ProcessRecord,
    is_running,
    rss_bytes,
    spawn,
    stop,
)
from escher_harness.localcluster.spec import ClusterSpec as ClusterSpec
from escher_harness.localcluster.startup import Startup, environment


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
        env=environment(cdir),
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


def adopt(dir: Path, records: Sequence[ProcessRecord]) -> ClusterInfo:
    """Make processes started beside the cluster (the workload operators) its components:
    `status` shows them and `down` stops them, before the control plane they talk to."""
    cdir = ClusterDir(dir)
    state = cdir.read_state()
    if state is None:
        raise ClusterError(f"no cluster in {dir}")
    processes = (*state.processes, *records)
    cdir.write_state(State(created_dir=state.created_dir, processes=processes))
    info = dataclasses.replace(load(cdir.root), processes=processes)
    write_json(cdir.cluster_file, info.to_json())
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
    """Start every component in order (startup), each once the previous one is ready, and
    write cluster.json."""
    run = Startup.begin(spec, cdir, created_dir, binaries, ports, started, progress)
    scheduler_config = run.write_files(user_config)
    run.etcd()
    run.apiserver()
    run.controller_manager()
    scheduler_name = config.scheduler_name(scheduler_config)
    run.objects(manifests, scheduler_name)
    kubelets = run.kwok()
    nodes = run.nodes()
    extender = run.extender()
    run.taken_over(kubelets, nodes)
    run.ready(extender)
    run.scheduler()
    info = ClusterInfo(
        dir=cdir.root,
        mode=spec.mode,
        kubeconfig=cdir.kubeconfig,
        apiserver=run.apiserver_url,
        scheduler_name=scheduler_name,
        nodes=nodes,
        resource_domain=spec.resource_domain,
        ports=dict(ports),
        processes=tuple(run.records),
        paths={
            "etcd_data": cdir.etcd_data,
            "cert_dir": cdir.cert_dir,
            "logs": cdir.logs,
            "scheduler_config": cdir.scheduler_config,
            "tokens": cdir.tokens,
            "sa_key": cdir.sa_key,
        },
        extender_url=run.extender_url,
        token=run.policy_token,
        ready_seconds=round(time.monotonic() - started, 3),
    )
    write_json(cdir.cluster_file, info.to_json())
    return info


def _executable(path: Path, what: str) -> Path:
    """`path` made absolute, or ClusterError if it is not an executable file."""
    path = path.absolute()
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise ClusterError(f"{what} {path} is not an executable file")
    return path
