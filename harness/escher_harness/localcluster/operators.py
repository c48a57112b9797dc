"""The workload operators whose gangs the extender is to place, as local processes beside the
embedded control plane: KubeRay's ray-operator, Kueue and Kubeflow's training operator (issue 60).

Called by the e2e tests (tests/e2e/test_operators.py) and, once wired, by `cluster up
--operators`: `start(names, info)` installs each operator's CRDs (copied from its Go module
into the cache by hack/build-operators.sh, `make operators`), starts it against the cluster's
kubeconfig with leader election off and its metrics and health endpoints on claimed loopback
ports, waits until its readiness endpoint answers, and returns an `Operators` whose `stop()`
undoes what `start` registered and stops the processes (`kill` and `revive` crash and restart
one, for the tests of an operator restarted in the middle of a gang's life).

What each is told, from the flags and configuration in its own source:
- ray-operator: `--batch-scheduler=scheduler-plugins`. Its pods get schedulerName
  `scheduler-plugins-scheduler` (fixed in KubeRay); a RayCluster labelled
  `ray.io/gang-scheduling-enabled` gets a scheduling.x-k8s.io/v1alpha1 PodGroup of its own name
  (minMember: desired workers + 1) and its pods the label `scheduling.x-k8s.io/pod-group`.
  Its RayCluster validating webhook is served only with ENABLE_WEBHOOKS=true, left unset here:
  its webhook server has no port flag (9443 on every interface, so two clusters' operators
  would collide), and RayCluster specs are not validated at admission (the reconciler still
  refuses an invalid one, with an event).
- training-operator: `--gang-scheduler-name=<gang_scheduler_name>` (any name but volcano means
  scheduler-plugins) and `--enable-scheme=pytorchjob` (TRAINING_SCHEMES; only those CRDs).
  Its jobs get a PodGroup of the job's name (minMember: all replicas, or
  runPolicy.schedulingPolicy.minAvailable), their pods that schedulerName and the pod-group
  label. It cannot start without its webhook server (its controllers wait for its cert
  rotator), which serves on a claimed port (all interfaces: v1.8.1 has no host flag) a
  certificate made as the harness's PKI makes its own, that the rotator accepts and keeps
  (see _training_certs); its ValidatingWebhookConfiguration is registered at
  https://127.0.0.1:<port>, so invalid jobs are refused at admission as in a real install.
- kueue: a Configuration file with the integrations batch/job, ray.io/raycluster and
  kubeflow.org/pytorchjob, its webhook server on 127.0.0.1 with a certificate from the
  harness's PKI (internal certificate management off), and its webhook configurations
  registered at https://127.0.0.1:<port> (only the webhooks of Kueue's own kinds and of those
  integrations), and the CRDs it converts between v1beta1 and v1beta2 sent there too (the
  module's CRD bases carry no conversion). Its metrics server (HTTPS, authorised through the
  apiserver) reads a certificate from the fixed /etc/kueue/metrics/certs, where the
  harness's is copied.
  VisibilityOnDemand is off, since that server writes its certificates to /visibility.
  stop() removes the webhook configurations before the process ends, so the cluster's Jobs
  and RayClusters are never refused by an absent webhook.
Beside them runs a kube-controller-manager with the job controller (Kueue's batch Jobs need it
to get pods) and, unless the cluster runs one already, the garbage collector (operators' child
objects go when their owner does).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from escher_harness.kubeclient import api_client
from escher_harness.localcluster import processes
from escher_harness.localcluster.binaries import bin_dir
from escher_harness.localcluster.clusterdir import ClusterDir
from escher_harness.localcluster.errors import ClusterError
from escher_harness.localcluster.health import wait_ready
from escher_harness.localcluster.manifests import Manifest, create_manifests, load_manifests
from escher_harness.localcluster.paths import cache_dir, podgroup_crd
from escher_harness.localcluster.pki import Pki, make_pki
from escher_harness.localcluster.pki import _key as pki_key
from escher_harness.localcluster.pki import _openssl as openssl
from escher_harness.localcluster.ports import allocate_ports, release_claims
from escher_harness.localcluster.processes import ProcessRecord

OPERATORS = ("kuberay", "kueue", "training-operator")
# The binary hack/build-operators.sh writes for each.
BINARIES = {"kuberay": "ray-operator", "kueue": "kueue", "training-operator": "training-operator"}
# KubeRay's scheduler-plugins integration fixes this schedulerName; the training operator is
# given the same, so one scheduler profile takes both operators' gangs.
GANG_SCHEDULER_NAME = "scheduler-plugins-scheduler"
KUEUE_FRAMEWORKS = ("batch/job", "ray.io/raycluster", "kubeflow.org/pytorchjob")
KUEUE_NAMESPACE = "kueue-system"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# The training operator's cert rotator keeps its CA in this Secret (its --webhook-secret-name
# default) in MY_POD_NAMESPACE (default kubeflow), and only starts once the Secret exists.
TRAINING_NAMESPACE = "kubeflow"
# The training operator's kinds it runs (--enable-scheme), and so the only CRDs of its that
# are installed: each is half a megabyte, and its six took minutes to be Established on a
# loaded machine (the PyTorchJob is the kind tried, docs/integrations.md).
TRAINING_SCHEMES = ("pytorchjob",)
TRAINING_SECRET = "training-operator-webhook-cert"
# The rotator waits for a certificate file at this fixed path (mounted from that Secret in a
# pod); the webhook server reads its own from $TMPDIR/k8s-webhook-server/serving-certs.
TRAINING_ROTATOR_CERT = Path("/tmp/k8s-webhook-server/serving-certs/tls.crt")
# The configuration whose caBundle the rotator keeps; the CA's and the server's DNS names it
# checks the Secret's certificates against (from --webhook-service-name and the namespace).
TRAINING_WEBHOOK_CONFIG = "validator.training-operator.kubeflow.org"
TRAINING_CA_NAME = "training-operator-ca"
TRAINING_DNS_NAME = f"training-operator.{TRAINING_NAMESPACE}.svc"
# The CRDs whose versions Kueue's webhook converts (v1beta1 and v1beta2): those that its
# module's config/components/crd/kustomization.yaml patches with a conversion webhook.
KUEUE_CONVERTED = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
# With internal certificate management off, Kueue serves its metrics over TLS with the
# certificate at this fixed path (mounted in a pod) and exits when there is none.
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")
_KUEUE_WEBHOOK_CONFIGS = {
    "MutatingWebhookConfiguration": "kueue-mutating-webhook-configuration",
    "ValidatingWebhookConfiguration": "kueue-validating-webhook-configuration",
}


class MissingOperatorError(ClusterError):
    """An operator's binary or CRDs are not in the cache."""


class ClusterLike(Protocol):
    """What start() needs of a running cluster (escher_harness.localcluster.ClusterInfo)."""

    @property
    def dir(self) -> Path: ...

    @property
    def kubeconfig(self) -> Path: ...

    @property
    def processes(self) -> Sequence[ProcessRecord]: ...


@dataclass
class Operators:
    """The started operators: their processes (to stop, or to add to the cluster's state so
    `down` stops them), their ports and what was registered in the cluster for them."""

    kubeconfig: Path
    owner: Path  # the cluster's state file, which the port claims name
    records: list[ProcessRecord] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)
    webhook_configs: list[tuple[str, str]] = field(default_factory=list)  # (kind, name)
    gang_scheduler_name: str = GANG_SCHEDULER_NAME
    # How each operator was started, to start it again the same way (revive).
    launchers: dict[str, Callable[[], ProcessRecord]] = field(default_factory=dict)

    def kill(self, name: str) -> None:
        """Kill operator `name` at once (SIGKILL, as a crash or an evicted pod would); its
        objects in the cluster stay. `revive` starts it again."""
        processes.stop(next(r for r in self.records if r.name == name), first=signal.SIGKILL)

    def revive(self, name: str, timeout: float = 90.0) -> None:
        """Start killed operator `name` again with the same flags, ports and certificates,
        as a restarted pod is; returns once it is ready."""
        old = next(r for r in self.records if r.name == name)
        new = self.launchers[name]()
        self.records[self.records.index(old)] = new
        wait_ready(new, deadline=time.monotonic() + timeout, timeout=timeout)

    def stop(self) -> None:
        """Remove the webhook configurations (while the operator still answers), then stop
        the processes, newest first, and release the ports."""
        if self.webhook_configs:
            with api_client(self.kubeconfig) as api:
                registration = client.AdmissionregistrationV1Api(api)
                for kind, name in self.webhook_configs:
                    delete = (
                        registration.delete_mutating_webhook_configuration
                        if kind == "MutatingWebhookConfiguration"
                        else registration.delete_validating_webhook_configuration
                    )
                    with contextlib.suppress(ApiException):  # already gone, or no apiserver
                        delete(name)
            self.webhook_configs.clear()
        for record in reversed(self.records):
            processes.stop(record)
        self.records.clear()
        release_claims(self.owner, self.ports.values())


@dataclass(frozen=True)
class _Files:
    binary: Path
    crds: tuple[Path, ...]
    root: Path  # .cache/operators/<name>


def files(name: str, env: Mapping[str, str] = os.environ) -> _Files:
    """Where `make operators` put `name`'s binary and CRDs; MissingOperatorError if absent."""
    binary = bin_dir(env).absolute() / BINARIES[name]
    root = cache_dir(env) / "operators" / name
    crds = tuple(sorted((root / "crds").glob("*.yaml")))
    if not (binary.is_file() and os.access(binary, os.X_OK)) or not crds:
        raise MissingOperatorError(
            f"{name} is not built ({binary}, CRDs in {root / 'crds'}): run `make operators`"
        )
    return _Files(binary, crds, root)


def missing(names: Sequence[str] = OPERATORS, env: Mapping[str, str] = os.environ) -> list[str]:
    """Why each of `names` cannot start (not built; the PodGroup CRD absent); empty if all can."""
    out = []
    for name in names:
        try:
            files(name, env)
        except MissingOperatorError as e:
            out.append(str(e))
    if set(names) & {"kuberay", "training-operator"} and not podgroup_crd(env).is_file():
        out.append(f"{podgroup_crd(env)} is missing: run `make peers`")
    return out


def start(
    names: Sequence[str],
    info: ClusterLike,
    *,
    gang_scheduler_name: str = GANG_SCHEDULER_NAME,
    kueue_frameworks: Sequence[str] = KUEUE_FRAMEWORKS,
    client_budget: tuple[float, int] | None = None,
    timeout: float = 90.0,
    env: Mapping[str, str] = os.environ,
) -> Operators:
    """Start `names` (of OPERATORS, in that order whatever the order given) on the cluster
    `info`; on any failure, stop what was started and raise ClusterError. `client_budget`,
    (qps, burst), is Kueue's and the job controller's API client budget (None: their own
    defaults, 20/30 and 20/30), so that a benchmark gives them the schedulers' budget."""
    unknown = sorted(set(names) - set(OPERATORS))
    if unknown:
        raise ClusterError(f"unknown operator(s) {', '.join(unknown)}: known are {OPERATORS}")
    wanted = [n for n in OPERATORS if n in names]
    if problems := missing(wanted, env):
        raise MissingOperatorError("; ".join(problems))
    cdir = ClusterDir(info.dir)
    work = cdir.operators
    work.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    ops = Operators(info.kubeconfig, cdir.state_file, gang_scheduler_name=gang_scheduler_name)
    try:
        ops.ports.update(
            allocate_ports({f"{n}-{p}": None for n in wanted for p in _PORTS[n]}, cdir.state_file)
        )
        pki = make_pki(work / "pki") if "kueue" in wanted else None
        training = (
            _training_certs(work / "training-certs") if "training-operator" in wanted else None
        )
        kueue_url = f"https://127.0.0.1:{ops.ports.get('kueue-webhook')}"
        conversion = _conversion(kueue_url, pki) if pki is not None else None
        _install(info.kubeconfig, wanted, env, deadline, conversion, training)
        ops.records.append(_job_controller(info, cdir, env, client_budget))
        # All started before any is waited for: each takes seconds to sync its informers.
        for name in wanted:
            run = _Launch(
                name, info, cdir, work / name, ops, pki, training, env, kueue_frameworks,
                client_budget,
            )  # fmt: skip
            ops.launchers[name] = functools.partial(_LAUNCHERS[name], run)
            ops.records.append(ops.launchers[name]())
        for record in ops.records:
            wait_ready(record, deadline=deadline, timeout=timeout)
        if pki is not None:
            _register_kueue_webhooks(ops, pki, env, kueue_frameworks, deadline)
        if training is not None:
            _register_training_webhooks(ops, training.ca, env, deadline)
    except BaseException:
        ops.stop()
        raise
    return ops


_PORTS = {
    "kuberay": ("metrics", "health"),
    "kueue": ("metrics", "health", "webhook", "visibility"),
    "training-operator": ("metrics", "health", "webhook"),
}


@dataclass(frozen=True)
class _Launch:
    name: str
    info: ClusterLike
    cdir: ClusterDir
    work: Path
    ops: Operators
    pki: Pki | None
    training: _TrainingCerts | None
    env: Mapping[str, str]
    kueue_frameworks: Sequence[str]
    client_budget: tuple[float, int] | None

    def port(self, kind: str) -> int:
        return self.ops.ports[f"{self.name}-{kind}"]

    def spawn(self, argv: list[str], extra_env: Mapping[str, str] | None = None) -> ProcessRecord:
        return processes.spawn(
            self.name,
            argv,
            log=self.cdir.log(self.name),
            port=self.port("health"),
            health_url=f"http://127.0.0.1:{self.port('health')}/readyz",
            extra_env=extra_env,
        )


def _ray_operator(run: _Launch) -> ProcessRecord:
    return run.spawn(
        [
            str(files("kuberay", run.env).binary),
            f"--kubeconfig={run.info.kubeconfig}",
            "--enable-leader-election=false",
            f"--metrics-addr=127.0.0.1:{run.port('metrics')}",
            f"--health-probe-bind-address=127.0.0.1:{run.port('health')}",
            "--batch-scheduler=scheduler-plugins",
            "--zap-log-level=info",
        ]
    )


def _training_operator(run: _Launch) -> ProcessRecord:
    assert run.training is not None
    certs = run.training
    # The webhook server reads os.TempDir()/k8s-webhook-server/serving-certs: a TMPDIR of its
    # own keeps two clusters' operators apart; the rotator only checks that its path exists.
    _place_certs(certs.cert, certs.key, run.work / "tmp" / "k8s-webhook-server" / "serving-certs")
    if not TRAINING_ROTATOR_CERT.exists():
        _place_certs(certs.cert, certs.key, TRAINING_ROTATOR_CERT.parent)
    return run.spawn(
        [
            str(files("training-operator", run.env).binary),
            f"--kubeconfig={run.info.kubeconfig}",
            "--leader-elect=false",
            f"--metrics-bind-address=127.0.0.1:{run.port('metrics')}",
            f"--health-probe-bind-address=127.0.0.1:{run.port('health')}",
            f"--webhook-server-port={run.port('webhook')}",
            f"--gang-scheduler-name={run.ops.gang_scheduler_name}",
            *(f"--enable-scheme={kind}" for kind in TRAINING_SCHEMES),
            "--zap-log-level=info",
        ],
        {"TMPDIR": str(run.work / "tmp"), "MY_POD_NAMESPACE": TRAINING_NAMESPACE},
    )


def _kueue(run: _Launch) -> ProcessRecord:
    assert run.pki is not None
    certs = run.work / "certs"
    _place_certs(run.pki.server_cert, run.pki.server_key, certs)
    try:
        _place_certs(run.pki.server_cert, run.pki.server_key, KUEUE_METRICS_CERTS)
    except OSError as e:
        raise ClusterError(f"kueue reads its metrics certificate from {e.filename}: {e}") from None
    configuration = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{run.port('health')}"},
        "metrics": {"bindAddress": f"127.0.0.1:{run.port('metrics')}"},
        "webhook": {"port": run.port("webhook"), "host": "127.0.0.1", "certDir": str(certs)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": list(run.kueue_frameworks)},
    }
    if run.client_budget is not None:
        qps, burst = run.client_budget
        configuration["clientConnection"] = {"qps": qps, "burst": burst}
    config_file = run.work / "config.yaml"
    config_file.write_text(yaml.safe_dump(configuration, sort_keys=False))
    return run.spawn(
        [
            str(files("kueue", run.env).binary),
            f"--kubeconfig={run.info.kubeconfig}",
            f"--config={config_file}",
            "--feature-gates=VisibilityOnDemand=false",
            f"--visibility-server-port={run.port('visibility')}",
            "--zap-log-level=info",
        ]
    )


def _place_certs(cert: Path, key: Path, directory: Path) -> None:
    """A server certificate and key as tls.crt and tls.key in `directory`, each replaced
    whole (a running operator's certificate watcher never reads half a file)."""
    directory.mkdir(parents=True, exist_ok=True)
    for source, name in ((cert, "tls.crt"), (key, "tls.key")):
        part = directory / f".{name}.{os.getpid()}"
        shutil.copy(source, part)
        part.replace(directory / name)


_LAUNCHERS: dict[str, Callable[[_Launch], ProcessRecord]] = {
    "kuberay": _ray_operator,
    "kueue": _kueue,
    "training-operator": _training_operator,
}


@dataclass(frozen=True)
class _TrainingCerts:
    ca: Path
    ca_key: Path
    cert: Path
    key: Path


def _training_certs(d: Path) -> _TrainingCerts:
    """A CA and a server certificate, made as the harness's PKI makes its own, that the
    training operator's cert rotator accepts and so keeps: the CA names itself
    TRAINING_CA_NAME, the server certificate is for TRAINING_DNS_NAME and 127.0.0.1, and both
    outlive the rotator's look-ahead of 90 days (else it makes a CA of its own and writes that
    into the webhook configuration, which the served certificate would not match)."""
    d.mkdir(parents=True, exist_ok=True)
    certs = _TrainingCerts(d / "ca.crt", d / "ca.key", d / "tls.crt", d / "tls.key")
    days = "400"
    # RSA in PKCS#1 for the CA: the rotator parses its key with x509.ParsePKCS1PrivateKey.
    openssl("genrsa", "-traditional", "-out", certs.ca_key, "2048")
    certs.ca_key.chmod(0o600)
    openssl("req", "-x509", "-new", "-key", certs.ca_key, "-subj", f"/CN={TRAINING_CA_NAME}",
            "-days", days, "-addext", f"subjectAltName=DNS:{TRAINING_CA_NAME}",
            "-out", certs.ca)  # fmt: skip
    pki_key(certs.key)
    csr, ext = d / "tls.csr", d / "tls.ext"
    openssl("req", "-new", "-key", certs.key, "-subj", "/CN=training-operator", "-out", csr)
    ext.write_text(
        f"subjectAltName=DNS:{TRAINING_DNS_NAME},IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
    )
    openssl("x509", "-req", "-in", csr, "-CA", certs.ca, "-CAkey", certs.ca_key,
            "-CAcreateserial", "-days", days, "-out", certs.cert, "-extfile", ext)  # fmt: skip
    return certs


def _job_controller(
    info: ClusterLike,
    cdir: ClusterDir,
    env: Mapping[str, str],
    client_budget: tuple[float, int] | None,
) -> ProcessRecord:
    controllers = ["job-controller"]
    if not any(p.name == "kube-controller-manager" for p in info.processes):
        controllers.append("garbage-collector-controller")
    binary = bin_dir(env).absolute() / "kube-controller-manager"
    if not binary.is_file():
        raise MissingOperatorError(f"{binary} is missing: run `make binaries`")
    name = "operators-controller-manager"
    return processes.spawn(
        name,
        [
            str(binary),
            f"--kubeconfig={info.kubeconfig}",
            f"--controllers={','.join(controllers)}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
            *(
                [f"--kube-api-qps={client_budget[0]}", f"--kube-api-burst={client_budget[1]}"]
                if client_budget
                else []
            ),
        ],
        log=cdir.log(name),
        port=0,
        health_url="",
    )


def _conversion(url: str, pki: Pki) -> dict[str, Any]:
    """A CRD's spec.conversion that sends conversions to Kueue's webhook server at `url`."""
    ca = base64.b64encode(pki.ca.read_bytes()).decode()
    client_config = {"url": f"{url}/convert", "caBundle": ca}
    return {
        "strategy": "Webhook",
        "webhook": {"clientConfig": client_config, "conversionReviewVersions": ["v1"]},
    }


def _install(
    kubeconfig: Path,
    names: Sequence[str],
    env: Mapping[str, str],
    deadline: float,
    conversion: dict[str, Any] | None,
    training: _TrainingCerts | None,
) -> None:
    """The operators' CRDs (and the PodGroup CRD the gang integrations write) that the cluster
    does not serve yet, Kueue's converted ones pointed at `conversion` (served ones too: a
    Kueue started again has a new port), and the namespaces and Secret the operators expect."""
    paths = [crd for name in names for crd in files(name, env).crds if _wanted(name, crd)]
    if set(names) & {"kuberay", "training-operator"}:
        paths.append(podgroup_crd(env))
    with api_client(kubeconfig) as api:
        extensions = client.ApiextensionsV1Api(api)
        crds = extensions.list_custom_resource_definition().items
        core = client.CoreV1Api(api)
        have = _names(crds) | _names(core.list_namespace().items)
        objects = []
        for m in load_manifests(paths):
            if conversion and m.is_crd and m.body["spec"]["names"]["plural"] in KUEUE_CONVERTED:
                if m.name in have:
                    patch = {"spec": {"conversion": conversion}}
                    extensions.patch_custom_resource_definition(m.name, patch)
                    continue
                m = _object({**m.body, "spec": {**m.body["spec"], "conversion": conversion}})
            if m.name not in have:
                objects.append(m)
        objects += [
            _object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            for ns in (KUEUE_NAMESPACE, TRAINING_NAMESPACE)
            if ns not in have
        ]
        if training is not None:
            # Replaced, not kept: a Secret of an earlier start holds another CA.
            with contextlib.suppress(ApiException):
                core.delete_namespaced_secret(TRAINING_SECRET, TRAINING_NAMESPACE)
            meta = {"name": TRAINING_SECRET, "namespace": TRAINING_NAMESPACE}
            files_ = {"ca.crt": training.ca, "ca.key": training.ca_key}
            files_ |= {"tls.crt": training.cert, "tls.key": training.key}
            data = {k: base64.b64encode(v.read_bytes()).decode() for k, v in files_.items()}
            secret = {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "data": data}
            objects.append(_object(secret))
        create_manifests(api, objects, deadline=deadline)


def _wanted(name: str, crd: Path) -> bool:
    """Whether operator `name`'s CRD file `crd` is installed (the training operator's: only
    those of TRAINING_SCHEMES, kubeflow.org_<kind>s.yaml)."""
    kind = crd.name.removeprefix("kubeflow.org_").removesuffix("s.yaml")
    return name != "training-operator" or kind in TRAINING_SCHEMES


def _names(items: Iterable[Any]) -> set[str]:
    return {item.metadata.name for item in items}


def _object(body: dict[str, Any]) -> Manifest:
    return Manifest(Path("<operators>"), body)


def _register_kueue_webhooks(
    ops: Operators, pki: Pki, env: Mapping[str, str], frameworks: Sequence[str], deadline: float
) -> None:
    """Kueue's webhook configurations from its module, pointed at its loopback server."""
    # A webhook is kept when it is for one of Kueue's own kinds or an enabled integration's:
    # the others (pods, deployments, ...) would send every such object of the cluster to Kueue.
    kept = {("kueue.x-k8s.io", "*")} | {
        (group, kind.lower() + "s") for group, _, kind in (f.partition("/") for f in frameworks)
    }

    def keep(hook: Mapping[str, Any]) -> bool:
        rules = hook.get("rules") or [{}]
        group, resources = rules[0].get("apiGroups", [""])[0], rules[0].get("resources", [])
        return (group, "*") in kept or any((group, r) in kept for r in resources)

    with api_client(ops.kubeconfig) as api:
        _register(api, ops, "kueue", env, pki.ca, _KUEUE_WEBHOOK_CONFIGS, keep)
        if "batch/job" in frameworks:
            _await_job_webhook(client.BatchV1Api(api), deadline)


def _register_training_webhooks(
    ops: Operators, ca: Path, env: Mapping[str, str], deadline: float
) -> None:
    """The training operator's ValidatingWebhookConfiguration from its module, pointed at its
    server, under the name its cert rotator keeps the caBundle of."""
    with api_client(ops.kubeconfig) as api:
        names = {"ValidatingWebhookConfiguration": TRAINING_WEBHOOK_CONFIG}
        _register(api, ops, "training-operator", env, ca, names, lambda hook: True)
        _await_pytorchjob_webhook(client.CustomObjectsApi(api), deadline)


def _register(
    api: client.ApiClient,
    ops: Operators,
    name: str,
    env: Mapping[str, str],
    ca: Path,
    names: Mapping[str, str],
    keep: Callable[[Mapping[str, Any]], bool],
) -> None:
    """Create the webhook configurations of `name`'s manifests.yaml (as `names` renames them
    by kind), keeping the webhooks `keep` says, each sent to its path on the operator's
    loopback port and trusting `ca`; one a killed run left behind is replaced."""
    url = f"https://127.0.0.1:{ops.ports[f'{name}-webhook']}"
    bundle = base64.b64encode(ca.read_bytes()).decode()
    registration = client.AdmissionregistrationV1Api(api)
    for m in load_manifests((files(name, env).root / "manifests.yaml",)):
        kind = m.body["kind"]
        hooks = [
            {
                **h,
                "clientConfig": {
                    "url": url + h["clientConfig"]["service"]["path"],
                    "caBundle": bundle,
                },
            }
            for h in m.body.get("webhooks") or []
            if keep(h)
        ]
        body = {**m.body, "metadata": {"name": names[kind]}, "webhooks": hooks}
        delete, create = (
            (
                registration.delete_mutating_webhook_configuration,
                registration.create_mutating_webhook_configuration,
            )
            if kind == "MutatingWebhookConfiguration"
            else (
                registration.delete_validating_webhook_configuration,
                registration.create_validating_webhook_configuration,
            )
        )
        with contextlib.suppress(ApiException):
            delete(names[kind])
        create(cast(Any, body))
        ops.webhook_configs.append((kind, names[kind]))


def _await_pytorchjob_webhook(custom: client.CustomObjectsApi, deadline: float) -> None:
    """Until the apiserver calls the training operator's webhook: a PyTorchJob of two masters,
    created as a dry run, is refused."""
    replicas = {
        "replicas": 2,
        "template": {"spec": {"containers": [{"name": "pytorch", "image": "p"}]}},
    }
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "training-webhook-probe"},
        "spec": {"pytorchReplicaSpecs": {"Master": replicas}},
    }
    while True:
        try:
            custom.create_namespaced_custom_object(
                "kubeflow.org", "v1", "default", "pytorchjobs", job, dry_run="All"
            )
        except ApiException as e:
            if "must be 1" in str(e.body):
                return
        if time.monotonic() > deadline:
            raise ClusterError("the training operator's webhook was not called in time")
        time.sleep(0.1)


def _await_job_webhook(batch: client.BatchV1Api, deadline: float) -> None:
    """Until the apiserver calls the new webhooks (it picks configurations up from a watch):
    a queued Job created as a dry run comes back suspended by Kueue's defaulting webhook."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "kueue-webhook-probe", "labels": {QUEUE_LABEL: "probe"}},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "probe", "image": "probe"}],
                }
            }
        },
    }
    while True:
        with contextlib.suppress(ApiException):  # refused while the webhook is half-known
            created = batch.create_namespaced_job("default", cast(Any, job), dry_run="All")
            if created.spec and created.spec.suspend:
                return
        if time.monotonic() > deadline:
            raise ClusterError("Kueue's job webhook was not called by the apiserver in time")
        time.sleep(0.1)
