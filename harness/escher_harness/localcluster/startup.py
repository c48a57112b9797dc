"""The steps of `cluster.up`: one method per component it starts, in the order it starts them.

cluster._start calls them, each once the previous one is ready: the files (the tokens, the
verbs' PKI, kubeconfig, kube-scheduler's configuration, the service-account key), etcd,
kube-apiserver, kube-controller-manager (mode dra), the objects the others need (the policies'
CRDs, the PodGroup CRD, deploy's admission policies, the spec's manifests such as a peer's
CRDs), kwok and the fake nodes, the extender (or its replicas behind the service proxy) and
kube-scheduler; the extender is started before kwok has taken the nodes over, and waited for
after. Every process is recorded in the cluster directory as soon as it is started,
so that `down` stops what a failed `up` left. cluster.start_component uses `environment`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import FailToCreateError

from escher_harness.kubeclient import api_client
from escher_harness.localcluster import config, gangate, kwok, markers
from escher_harness.localcluster.binaries import Binaries
from escher_harness.localcluster.clusterdir import ClusterDir, State
from escher_harness.localcluster.config import (
    SERVICE_PROXY,
    VERBS,
    VERBS_HTTP1,
    is_replica,
    replica_name,
)
from escher_harness.localcluster.errors import ClusterError
from escher_harness.localcluster.fakenodes import NodeShape, create_nodes
from escher_harness.localcluster.health import start_failure, wait_ready
from escher_harness.localcluster.manifests import (
    Manifest,
    ManifestError,
    create_manifests,
    in_domain,
    load_manifests,
)
from escher_harness.localcluster.paths import podgroup_crd, policy_crds
from escher_harness.localcluster.pki import Pki, make_pki
from escher_harness.localcluster.processes import ProcessRecord, spawn
from escher_harness.localcluster.spec import ClusterSpec
from extender.core.pod import Keys
from extender.gang.args import GangArgs
from extender.scheduling import profile


@dataclass
class Startup:
    """One `up` under way: what its steps share, and the processes started so far."""

    spec: ClusterSpec
    cdir: ClusterDir
    created_dir: bool
    binaries: Binaries
    ports: Mapping[str, int]
    started: float  # time.monotonic() when `up` was called
    say: Callable[[str], None]
    admin_token: str
    policy_token: str | None  # the extender's policy API (modes extender and pure)
    verbs_tls: Pki | None  # the verbs over mutual TLS (mode extender)
    environment: dict[str, str]
    records: list[ProcessRecord] = field(default_factory=list)

    @classmethod
    def begin(
        cls,
        spec: ClusterSpec,
        cdir: ClusterDir,
        created_dir: bool,
        binaries: Binaries,
        ports: Mapping[str, int],
        started: float,
        progress: Callable[[str], None] | None,
    ) -> Startup:
        """The tokens and, for the verbs over mutual TLS, their PKI (the first files)."""
        with_verbs_tls = VERBS in ports and spec.verbs_tls
        return cls(
            spec=spec,
            cdir=cdir,
            created_dir=created_dir,
            binaries=binaries,
            ports=ports,
            started=started,
            say=progress or (lambda _message: None),
            admin_token=secrets.token_hex(16),
            policy_token=secrets.token_hex(16) if "extender" in ports else None,
            verbs_tls=make_pki(cdir.cert_dir / "extender") if with_verbs_tls else None,
            environment=environment(cdir),
        )

    @property
    def deadline(self) -> float:
        return self.started + self.spec.timeout

    @property
    def apiserver_url(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def extender_url(self) -> str | None:
        """The extender's (or, with replicas, the service proxy's) policy API and health."""
        port = self.ports.get("extender")
        return f"http://127.0.0.1:{port}" if port is not None else None

    def write_files(self, user_config: Mapping[str, Any] | None) -> dict[str, Any]:
        """Write the tokens, the kubeconfig, kube-scheduler's configuration (returned) and
        the service-account key."""
        spec, cdir = self.spec, self.cdir
        scheduler_config = self._scheduler_config(user_config)
        if spec.mode == "extender":
            # As deploy/'s scheduler checks its configuration before it starts (a user's file
            # above all): said, not refused, so an experiment can still run.
            keys = Keys.for_domain(spec.resource_domain)
            wait = GangArgs().wait_seconds
            for problem in profile.problems(scheduler_config, keys, wait):
                self.say(f"warning: kube-scheduler's configuration: {problem}")
        _write_private(cdir.tokens, config.render_tokens_csv(self.admin_token))
        _write_private(
            cdir.kubeconfig, config.render_kubeconfig(self.apiserver_url, self.admin_token)
        )
        cdir.scheduler_config.write_text(config.dump_yaml(scheduler_config))
        _generate_rsa_key(cdir.sa_key)
        cdir.cert_dir.mkdir(exist_ok=True)  # make_pki may have made it
        cdir.logs.mkdir(exist_ok=True)
        return scheduler_config

    def _scheduler_config(self, user_config: Mapping[str, Any] | None) -> dict[str, Any]:
        spec, ports = self.spec, self.ports
        verbs_url = None
        if VERBS in ports:
            verbs_url = f"{'https' if self.verbs_tls else 'http'}://127.0.0.1:{ports[VERBS]}"
        http1_url = f"https://127.0.0.1:{ports[VERBS_HTTP1]}" if VERBS_HTTP1 in ports else None
        return config.scheduler_config(
            spec.mode,
            user_config=user_config,
            kubeconfig=self.cdir.kubeconfig,
            extender_url=verbs_url or self.extender_url,
            client_qps=spec.client_qps,
            client_burst=spec.client_burst,
            percentage_of_nodes_to_score=spec.percentage_of_nodes_to_score,
            verbs_tls=self.verbs_tls,
            split=spec.resource_domain if spec.split else None,
            http1_url=http1_url,
        )

    def launch(
        self, name: str, argv: list[str], port: int, health_url: str, wait: bool = True, **kw: Any
    ) -> ProcessRecord:
        """Start one component, record it, and (unless not `wait`) wait until it is ready."""
        spec, cdir = self.spec, self.cdir
        # An interrupt between starting a process and recording it would orphan it: the
        # clean-up only stops what the state file names. So Ctrl-C / SIGTERM wait until then.
        with _interrupts_deferred():
            record = spawn(
                name,
                argv,
                log=cdir.log(name),
                port=port,
                health_url=health_url,
                env=self.environment,
                cpus=spec.cpu_split.of(name) if spec.cpu_split else None,
                nice=spec.extender_nice if name == "extender" or is_replica(name) else 0,
                **kw,
            )
            self.records.append(record)
            cdir.write_state(State(created_dir=self.created_dir, processes=tuple(self.records)))
        if wait:
            self.ready([record])
        return record

    def ready(self, records: list[ProcessRecord]) -> None:
        """Wait until each of `records` that has a health URL is ready, in turn."""
        for record in records:
            if record.health_url:
                wait_ready(record, deadline=self.deadline, timeout=self.spec.timeout)
                self.say(f"{record.name} ready ({self._elapsed():.1f}s)")

    def etcd(self) -> None:
        ports = self.ports
        self.launch(
            "etcd",
            config.etcd_command(
                self.binaries.etcd,
                data_dir=self.cdir.etcd_data,
                client_port=ports["etcd"],
                peer_port=ports["etcd_peer"],
            ),
            ports["etcd"],
            f"http://127.0.0.1:{ports['etcd']}/health",
        )

    def apiserver(self) -> None:
        cdir = self.cdir
        feature_gates, runtime_config, _ = _gates(self.spec)
        self.launch(
            "kube-apiserver",
            config.apiserver_command(
                self.binaries.kube_apiserver,
                etcd_port=self.ports["etcd"],
                port=self.ports["apiserver"],
                cert_dir=cdir.cert_dir,
                tokens=cdir.tokens,
                sa_key=cdir.sa_key,
                feature_gates=feature_gates,
                runtime_config=runtime_config,
                audit=self._audit(),
            ),
            self.ports["apiserver"],
            f"{self.apiserver_url}/readyz",
            health_token=self.admin_token,
        )

    def _audit(self) -> tuple[Path, Path] | None:
        """With spec.audit_log: the policy written, and (policy, log) for kube-apiserver."""
        if not self.spec.audit_log:
            return None
        self.cdir.audit_policy.write_text(config.AUDIT_POLICY)
        return self.cdir.audit_policy, self.cdir.audit_log

    def controller_manager(self) -> None:
        """Mode dra: kube-scheduler creates a ResourceClaim per pod; the resource-claim
        controller releases it when the pod ends and the garbage collector deletes it with
        the pod. Without them a deleted pod's device stays allocated for ever."""
        if self.binaries.kube_controller_manager is None:
            return
        self.launch(
            "kube-controller-manager",
            config.controller_manager_command(
                self.binaries.kube_controller_manager,
                kubeconfig=self.cdir.kubeconfig,
                client_qps=self.spec.client_qps,
                client_burst=self.spec.client_burst,
            ),
            0,
            "",
        )

    def objects(self, manifests: tuple[Manifest, ...], scheduler_name: str) -> None:
        """Create the objects the extender and kube-scheduler need, then the spec's own."""
        spec = self.spec
        if self.extender_url:
            # The policies' CRDs, served wherever the service runs (deploy/ installs them too).
            crds = in_domain(load_manifests(policy_crds()), spec.resource_domain)
            manifests = (*crds, *manifests)
        if spec.gang_declarations:
            crd = podgroup_crd()
            if not crd.is_file():
                raise ClusterError(
                    f"{crd} is missing: run `make peers` (gang_declarations needs it)"
                )
            manifests = (*manifests, *load_manifests((crd,)))
        if spec.gang_gate:
            manifests = (*manifests, *gangate.manifests(scheduler_name))
        if spec.split:
            manifests = (*manifests, *markers.manifests(scheduler_name, spec.resource_domain))
        if manifests:
            _create_manifest_objects(self.cdir.kubeconfig, manifests, self.deadline)
            self.say(f"{len(manifests)} manifest objects created ({self._elapsed():.1f}s)")

    def kwok(self) -> ProcessRecord | None:
        """kwok, unless the spec turned it off. It starts before the nodes are created and
        takes them over as they come; it serves no endpoint (nodes() waits for it)."""
        if not self.binaries.kwok:
            return None
        return self.launch(
            "kwok",
            config.kwok_command(
                self.binaries.kwok, kubeconfig=self.cdir.kubeconfig, stages=kwok.STAGES
            ),
            0,
            "",
        )

    def nodes(self) -> tuple[str, ...]:
        """Create the fake nodes (Ready: kwok's taking them over only changes their status).
        They exist before the extender and kube-scheduler start, so both see them at once."""
        nodes = tuple(f"node-{i}" for i in range(self.spec.nodes))
        _create_nodes(self.spec, self.cdir.kubeconfig, nodes, self.say)
        return nodes

    def taken_over(self, kubelets: ProcessRecord | None, nodes: tuple[str, ...]) -> None:
        """Wait until `kubelets` (kwok) has taken every one of `nodes` over."""
        if kubelets is not None:
            deadline = time.monotonic() + self.spec.timeout
            _wait_for_kwok(kubelets, self.cdir.kubeconfig, nodes, deadline)
            self.say(f"kwok took over {len(nodes)} nodes ({self._elapsed():.1f}s)")

    def extender(self) -> list[ProcessRecord]:
        """Start the extender service (modes extender and pure): one, or spec.replicas of
        them behind the service proxy. Not waited for: `ready` is called with what this
        returns, so their start (mostly their imports) overlaps kwok's taking the nodes
        over."""
        if not (self.extender_url and self.policy_token):
            return []
        if self.spec.replicas > 1:
            return self._replicas()
        ports = self.ports
        record = self.launch(
            "extender",
            self._extender_argv(ports["extender"], ports.get(VERBS), ports.get(VERBS_HTTP1)),
            ports["extender"],
            f"{self.extender_url}/readyz",
            wait=False,
            extra_env=self._gate_env(),
        )
        return [record]

    def _replicas(self) -> list[ProcessRecord]:
        ports = self.ports
        names = [replica_name(i) for i in range(self.spec.replicas)]
        records = []
        for i, name in enumerate(names):
            # Alive is what each replica must be: only the leader is ready.
            record = self.launch(
                name,
                self._extender_argv(
                    ports[name],
                    ports.get(f"{VERBS}-{i}"),
                    ports.get(f"{VERBS_HTTP1}-{i}"),
                    identity=name,
                ),
                ports[name],
                f"http://127.0.0.1:{ports[name]}/healthz",
                wait=False,
                extra_env={**self.spec.lease.environment(), **self._gate_env()},
            )
            records.append(record)
        # Ready once a leader is ready behind it: its /readyz is the leader's.
        service = ["extender", *(p for p in (VERBS, VERBS_HTTP1) if p in ports)]
        proxy = self.launch(
            SERVICE_PROXY,
            config.service_proxy_command(
                ports=[ports[p] for p in service],
                backends=[
                    [ports[n], *(ports[f"{p}-{i}"] for p in service[1:])]
                    for i, n in enumerate(names)
                ],
                poll=self.spec.proxy_poll,
            ),
            ports["extender"],
            f"{self.extender_url}/readyz",
            wait=False,
        )
        return [*records, proxy]

    def _extender_argv(
        self,
        port: int,
        verbs_port: int | None,
        http1_port: int | None,
        identity: str | None = None,
    ) -> list[str]:
        spec = self.spec
        assert self.policy_token is not None
        return config.extender_command(
            port=port,
            kubeconfig=self.cdir.kubeconfig,
            mode=spec.mode,
            token=self.policy_token,
            domain=spec.resource_domain,
            kube_qps=spec.client_qps,
            kube_burst=spec.client_burst,
            identity=identity,
            verbs_port=verbs_port,
            verbs_tls=self.verbs_tls,
            verbs_http2=spec.verbs_http2,
            verbs_http1_port=http1_port,
        )

    def _gate_env(self) -> dict[str, str]:
        return {"ESCHER_GANG_GATE_SWITCH": gangate.switch_name()} if self.spec.gang_gate else {}

    def scheduler(self) -> None:
        port = self.ports["scheduler"]
        self.launch(
            "kube-scheduler",
            config.scheduler_command(
                self.binaries.kube_scheduler,
                config=self.cdir.scheduler_config,
                port=port,
                feature_gates=_gates(self.spec)[2],
            ),
            port,
            # /readyz (unlike /healthz) waits for the scheduler's informers and event handlers.
            f"https://127.0.0.1:{port}/readyz",
            extra_env=config.SCHEDULER_ENV,
        )

    def _elapsed(self) -> float:
        return time.monotonic() - self.started


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


def environment(cdir: ClusterDir) -> dict[str, str]:
    """Every component's environment: Python output unbuffered (the extender's log is read
    while it runs), and kwok's work directory in the cluster's, so that no ~/.kwok/kwok.yaml
    adds stages of its own."""
    return {**os.environ, "PYTHONUNBUFFERED": "1", "KWOK_WORKDIR": str(cdir.root)}


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
