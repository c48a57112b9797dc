"""The deploy/ manifests on the real local control plane, one cluster per overlay.

Per mode (extender, pure), the overlay is rendered with kubectl's kustomize and applied with
server-side apply to a real kube-apiserver. kube-scheduler runs the overlay's own
KubeSchedulerConfiguration (from the rendered ConfigMap; only the extender's addresses, each
entry's port made a free local one, and the CA file are made local, and the launcher turns
leader election off). The extender runs as its ServiceAccount: a token from the TokenRequest
API in a kubeconfig, so it has exactly the permissions the manifests grant, and it serves
HTTPS with a certificate from a test CA.

What is proven: the API server accepts every object, the Pod Security level holds, the
ServiceAccount may do exactly the least-privilege set (as the API server itself reports) and
that is enough for a whole scheduling round, what it must not do is refused with 403,
kube-scheduler talks to the extender over verified TLS (filter and prioritize on the HTTP/1.1
verbs listener, bind on the HTTP/2 one) and refuses a certificate from another CA, and
misconfigurations (a wrong API token, an unreachable extender) are named in the logs and
metrics.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import httpx
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from rbac import EXPECTED

from escher_harness import localcluster
from escher_harness.bench import apimetrics
from escher_harness.kubeclient import api_client
from escher_harness.localcluster.binaries import find_kubectl
from escher_harness.localcluster.config import render_kubeconfig
from escher_harness.localcluster.errors import MissingBinaryError
from escher_harness.localcluster.fakenodes import NodeShape, create_nodes
from escher_harness.localcluster.health import wait_ready
from escher_harness.localcluster.operators import GANG_SCHEDULER_NAME
from escher_harness.localcluster.pki import make_pki
from escher_harness.localcluster.ports import allocate_ports
from escher_harness.localcluster.processes import ProcessRecord, spawn, stop
from escher_harness.workload import Workload, pod_manifest
from extender.cli import build_parser, settings_of
from extender.core import quantity
from extender.core.pod import MARKER_CAPACITY, Keys
from extender.esl.client import PolicyClient
from extender.settings import Settings

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
MODES = ["extender", "pure"]
NAMESPACE = "escher-system"
SERVICE_ACCOUNT = "escher-extender"
RBAC_REFUSAL = f'"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}" cannot'
TOUCH_REFUSAL = "may change only the escher.io/requeued-at annotation"
SPEC_REFUSAL = "may change no field of a pod's spec but remove the escher.io/gang scheduling gate"
STATUS_REFUSAL = "may change only a pod's status.nominatedNodeName"
# Granted by kube-apiserver's bootstrap policy, not by the manifests, (group, resource): the
# self reviews to every authenticated user (system:basic-user), and since 1.37, where
# ClusterTrustBundle is GA, reading clustertrustbundles to every ServiceAccount
# (system:cluster-trust-bundle-discovery).
BOOTSTRAP_GRANTS = {
    ("authentication.k8s.io", "selfsubjectreviews"),
    *(("authorization.k8s.io", r) for r in ("selfsubjectaccessreviews", "selfsubjectrulesreviews")),
    ("certificates.k8s.io", "clustertrustbundles"),
}
_names = itertools.count()
KEYS = Keys.for_domain("escher.io")


def gang_of_one(name: str, **kwargs: Any) -> dict[str, Any]:
    """A pod the extender's exchanges are for, as deploy/ splits them: a gang member (of a
    gang of one), which the marker policy marks for filter and bind."""
    return pod_manifest(
        name, labels={"escher.io/gang": name}, annotations={"escher.io/gang-min": "1"}, **kwargs
    )


@dataclass(frozen=True)
class Tls:
    ca: Path
    cert: Path
    key: Path
    # A certificate for the same address from a CA kube-scheduler does not trust.
    rogue_cert: Path
    rogue_key: Path
    # kube-scheduler's client certificate, signed by `ca`: the verbs' listener requires it.
    client_cert: Path
    client_key: Path


@dataclass
class Env:
    mode: str
    info: localcluster.ClusterInfo
    kubectl: Path
    rendered: list[dict[str, Any]]
    apply_warnings: str
    tls: Tls
    port: int
    policy_token: str
    sa_kubeconfig: Path
    verbs_port: int
    verbs_http1_port: int
    processes: list[ProcessRecord] = field(default_factory=list)
    extender: ProcessRecord | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def scheduler_log(self) -> Path:
        return self.info.paths["logs"] / "kube-scheduler.log"

    def run_extender(
        self,
        name: str,
        *,
        kubeconfig: Path,
        port: int,
        tls: tuple[Path, Path] | None,
        ready: str,
        flags: tuple[str, ...] = (),
    ) -> ProcessRecord:
        """`escher-extender serve` as a process group of its own, waited for at `ready`."""
        argv = [
            sys.executable, "-m", "extender", "serve",
            "--kubeconfig", str(kubeconfig),
            "--mode", self.mode,
            "--token", self.policy_token,
            "--port", str(port),
            *flags,
        ]  # fmt: skip
        if tls is not None:
            argv += ["--tls-cert-file", str(tls[0]), "--tls-key-file", str(tls[1])]
        scheme = "https" if tls else "http"
        record = spawn(
            name,
            argv,
            log=self.info.paths["logs"] / f"{name}.log",
            port=port,
            health_url=f"{scheme}://127.0.0.1:{port}{ready}",
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.processes.append(record)
        wait_ready(record, deadline=time.monotonic() + 60, timeout=60)
        return record

    def start_extender(self, cert: Path, key: Path) -> None:
        """The extender under test: the ServiceAccount's kubeconfig, HTTPS on self.port, and
        the Deployment's leader election (ready only once it leads, on the Lease its Role
        grants)."""
        self.stop_extender()
        self.extender = self.run_extender(
            f"extender-{next(_names)}",
            kubeconfig=self.sa_kubeconfig,
            port=self.port,
            tls=(cert, key),
            ready="/readyz",
            flags=self.leader_election_flags + self.gang_gate_flags + self.verbs_flags,
        )

    @property
    def leader_election_flags(self) -> tuple[str, ...]:
        return tuple(
            a for a in extender_args(self.rendered) if a.startswith(("--leader", "--lease"))
        )

    @property
    def gang_gate_flags(self) -> tuple[str, ...]:
        """The overlay's adaptive gang gate switch (extender mode)."""
        return tuple(a for a in extender_args(self.rendered) if a.startswith("--gang-gate"))

    @property
    def verbs_flags(self) -> tuple[str, ...]:
        """The overlay's mutual-TLS verbs listeners (HTTP/2, and HTTP/1.1 beside it), on free
        local ports with the local CA."""
        overlay = serve_settings(self.rendered)
        if overlay.listen.verbs_port is None:
            return ()
        flags = ("--verbs-port", str(self.verbs_port), "--verbs-client-ca-file", str(self.tls.ca))
        if overlay.listen.verbs_http1_port is not None:
            flags += ("--verbs-http1-port", str(self.verbs_http1_port))
        return flags

    @property
    def verbs_url(self) -> str:
        return f"https://127.0.0.1:{self.verbs_port}"

    @property
    def verbs_http1_url(self) -> str:
        return f"https://127.0.0.1:{self.verbs_http1_port}"

    def stop_extender(self) -> None:
        if self.extender is not None:
            self.stop(self.extender)
            self.extender = None

    def stop(self, record: ProcessRecord) -> None:
        stop(record)
        self.processes.remove(record)

    def policy(self) -> PolicyClient:
        return PolicyClient(self.url, self.policy_token, verify=str(self.tls.ca))

    def metrics(self) -> str:
        verify = ssl.create_default_context(cafile=str(self.tls.ca))
        return httpx.get(f"{self.url}/metrics", verify=verify).text


def kubectl_run(
    kubectl: Path, kubeconfig: Path | None, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    config = ["--kubeconfig", str(kubeconfig)] if kubeconfig else []
    return subprocess.run(
        [str(kubectl), *config, *args], input=stdin, capture_output=True, text=True, timeout=120
    )


def render(kubectl: Path, mode: str) -> list[dict[str, Any]]:
    r = kubectl_run(kubectl, None, "kustomize", str(REPO / "deploy" / "overlays" / mode))
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def apply(kubectl: Path, kubeconfig: Path, docs: list[dict[str, Any]], *flags: str) -> str:
    """Server-side apply; returns kubectl's stderr (the API server's warnings)."""
    r = kubectl_run(
        kubectl,
        kubeconfig,
        "apply",
        "--server-side",
        *flags,
        "-f",
        "-",
        stdin=yaml.safe_dump_all(docs),
    )
    assert r.returncode == 0, r.stderr
    return r.stderr


def deploy_overlay(
    kubectl: Path, info: localcluster.ClusterInfo, overlay: str, account: str, out: Path
) -> tuple[list[dict[str, Any]], str, Path]:
    """The overlay rendered and applied with server-side apply, its namespace first (the
    ServiceAccounts and Roles live in it, and its Pod Security labels are in force for what
    follows): the objects, the API server's warnings, and a kubeconfig at `out` with a token
    of the ServiceAccount `account`, as its pod would have."""
    rendered = render(kubectl, overlay)
    apply(kubectl, info.kubeconfig, [x for x in rendered if x["kind"] == "Namespace"])
    warnings = apply(kubectl, info.kubeconfig, rendered)
    token = service_account_token(info.kubeconfig, account)
    out.write_text(render_kubeconfig(info.apiserver, token))
    return rendered, warnings, out


def extender_args(rendered: list[dict[str, Any]]) -> list[str]:
    """The extender container's arguments, as the overlay renders them."""
    (deployment,) = [
        d for d in rendered
        if d["kind"] == "Deployment" and d["metadata"]["name"] == SERVICE_ACCOUNT
    ]  # fmt: skip
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


def serve_settings(rendered: list[dict[str, Any]]) -> Settings:
    """The extender container's arguments as `escher-extender serve` parses them."""
    return settings_of(build_parser().parse_args(["serve", *extender_args(rendered)]))


def make_tls(d: Path) -> Tls:
    """Two CAs, a serving certificate for 127.0.0.1 from each, and kube-scheduler's client
    certificate from the first."""
    pki, rogue = make_pki(d / "ca"), make_pki(d / "rogue-ca")
    return Tls(
        pki.ca,
        pki.server_cert,
        pki.server_key,
        rogue.server_cert,
        rogue.server_key,
        pki.client_cert,
        pki.client_key,
    )


def local_scheduler_config(
    rendered: list[dict[str, Any]], local: Mapping[int, int], tls: Tls, out: Path
) -> Path:
    """The overlay's KubeSchedulerConfiguration, each entry pointed at the local listener
    (`local`: the overlay's port to the local one) of its port, with the local CA and client
    certificate files."""
    (configmap,) = [d for d in rendered if d["kind"] == "ConfigMap"]
    config = yaml.safe_load(configmap["data"]["config.yaml"])
    for extender in config.get("extenders") or []:
        port = urlsplit(extender["urlPrefix"]).port
        assert port in local, extender
        extender["urlPrefix"] = f"https://127.0.0.1:{local[port]}"
        tls_config = extender["tlsConfig"]
        tls_config["caFile"] = str(tls.ca)
        if "certFile" in tls_config:
            tls_config |= {"certFile": str(tls.client_cert), "keyFile": str(tls.client_key)}
    out.write_text(yaml.safe_dump(config))
    return out


def service_account_token(kubeconfig: Path, account: str = SERVICE_ACCOUNT) -> str:
    """A token for the ServiceAccount from the TokenRequest API (as a pod's projected one)."""
    core = client.CoreV1Api(api_client(kubeconfig))
    # No audiences: the API server's own, as for a pod's token.
    spec = client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    request = client.AuthenticationV1TokenRequest(spec=spec)
    reply = core.create_namespaced_service_account_token(account, NAMESPACE, request)
    assert reply.status is not None and reply.status.token
    return reply.status.token


@pytest.fixture(scope="module")
def kubectl() -> Path:
    try:
        return find_kubectl()
    except MissingBinaryError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="module", params=MODES)
def env(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, kubectl: Path
) -> Iterator[Env]:
    mode: str = request.param
    d = tmp_path_factory.mktemp(f"deploy-{mode}")
    tls = make_tls(d / "tls")
    ports = allocate_ports({"extender": None, "verbs": None, "verbs-http1": None})
    rendered = render(kubectl, mode)
    # kube-scheduler calls each entry's verbs listener, where the overlay has them.
    overlay = serve_settings(rendered)
    local = {
        overlay.listen.verbs_port: ports["verbs"],
        overlay.listen.verbs_http1_port: ports["verbs-http1"],
    }
    config = local_scheduler_config(
        rendered,
        {k: v for k, v in local.items() if k is not None},
        tls,
        d / "scheduler-config.yaml",
    )
    info = localcluster.up(
        localcluster.ClusterSpec(dir=d / "cluster", nodes=2, mode="none", scheduler_config=config)
    )
    e: Env | None = None
    try:
        _, warnings, sa_kubeconfig = deploy_overlay(
            kubectl, info, mode, SERVICE_ACCOUNT, d / "escher-extender.kubeconfig"
        )
        e = Env(
            mode,
            info,
            kubectl,
            rendered,
            warnings,
            tls,
            ports["extender"],
            "policy-token",
            sa_kubeconfig,
            ports["verbs"],
            ports["verbs-http1"],
        )
        e.start_extender(tls.cert, tls.key)
        yield e
    finally:
        for record in reversed(e.processes if e else []):
            stop(record)
        localcluster.down(info.dir, keep_logs=True)


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def log_lines_about(path: Path, pod: str) -> list[str]:
    return [line for line in path.read_text().splitlines() if f"default/{pod}" in line]


def metric(text: str, name: str, labels: dict[str, str]) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} "):
            return float(line.split()[-1])
    return 0.0


def test_every_object_is_accepted_by_the_api_server(env: Env) -> None:
    expected = {f"{d['kind']}/{d['metadata']['name']}".lower() for d in env.rendered}
    r = kubectl_run(
        env.kubectl, env.info.kubeconfig, "get", "-f", "-", "-o", "name",
        stdin=yaml.safe_dump_all(env.rendered),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    on_server = {re.sub(r"^([a-z]+)\.[a-z0-9.]+/", r"\1/", n) for n in r.stdout.split()}
    assert on_server == expected
    # No warning: the pod templates meet the namespace's restricted Pod Security level, and
    # no API in use is deprecated.
    assert env.apply_warnings == ""


def test_the_pod_security_check_is_live(env: Env) -> None:
    """The empty warnings above mean something: a pod template that breaks the restricted
    level is flagged by the same API server."""
    deployment = next(d for d in env.rendered if d["metadata"]["name"] == "escher-extender"
                      and d["kind"] == "Deployment")  # fmt: skip
    broken = json.loads(json.dumps(deployment))
    del broken["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"]
    broken["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {}
    warnings = apply(env.kubectl, env.info.kubeconfig, [broken], "--dry-run=server")
    assert 'would violate PodSecurity "restricted' in warnings


def test_the_api_server_grants_the_service_account_exactly_the_least_privilege_set(
    env: Env,
) -> None:
    # Asked with the ServiceAccount's own token: what the API server's authorizer will allow.
    authorization = client.AuthorizationV1Api(api_client(env.sa_kubeconfig))
    spec = client.V1SelfSubjectRulesReviewSpec(namespace="default")
    review = authorization.create_self_subject_rules_review(
        client.V1SelfSubjectRulesReview(spec=spec)
    )
    assert review.status is not None
    rules = review.status.resource_rules
    granted = {
        (group, resource, verb)
        for rule in rules
        for group in rule.api_groups or []
        for resource in rule.resources or []
        for verb in rule.verbs
        if (group, resource) not in BOOTSTRAP_GRANTS
    }
    assert granted == EXPECTED[env.mode]
    assert not any(rule.resource_names for rule in rules)


def test_the_extender_leads_on_the_lease_its_role_grants_and_no_other(env: Env) -> None:
    # It became ready, so it holds the lease: created and renewed with the Role's grants.
    leases = client.CoordinationV1Api(api_client(env.info.kubeconfig))
    lease = leases.read_namespaced_lease(SERVICE_ACCOUNT, NAMESPACE)
    assert lease.spec is not None and lease.spec.holder_identity, lease
    assert lease.metadata is not None
    assert (lease.metadata.annotations or {}).get("extender.escher.io/resource-domain") == (
        "escher.io"
    )
    # The Role names its own Lease: kube-scheduler's is out of reach.
    authorization = client.AuthorizationV1Api(api_client(env.sa_kubeconfig))
    for namespace, name in ((NAMESPACE, "escher-scheduler"), ("kube-system", "kube-scheduler")):
        attributes = client.V1ResourceAttributes(
            group="coordination.k8s.io", resource="leases", verb="update",
            namespace=namespace, name=name,
        )  # fmt: skip
        review = authorization.create_self_subject_access_review(
            client.V1SelfSubjectAccessReview(
                spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes)
            )
        )
        assert review.status is not None and not review.status.allowed, (namespace, name)


def test_a_stopped_extender_gives_its_lease_up_so_the_next_leads_at_once(env: Env) -> None:
    # SIGTERM (a rollout, a drain) releases the lease, as kube-scheduler's ReleaseOnCancel:
    # the next replica leads within a retry period, not a lease duration.
    leases = client.CoordinationV1Api(api_client(env.info.kubeconfig))
    held = leases.read_namespaced_lease(SERVICE_ACCOUNT, NAMESPACE).spec
    assert held is not None and held.holder_identity, held
    env.stop_extender()
    try:
        released = leases.read_namespaced_lease(SERVICE_ACCOUNT, NAMESPACE).spec
        assert released is not None
        assert not released.holder_identity, released
        assert released.lease_duration_seconds == 1, released
    finally:
        env.start_extender(env.tls.cert, env.tls.key)
    led = leases.read_namespaced_lease(SERVICE_ACCOUNT, NAMESPACE).spec
    assert led is not None and led.holder_identity not in ("", held.holder_identity), led


def test_a_scheduling_round_needs_nothing_beyond_the_role(env: Env) -> None:
    admin = api_client(env.info.kubeconfig)
    # A node that appears after the extender started: its write-back first reads the node's
    # status (get nodes/status), then patches it.
    late = f"late-{next(_names)}"
    create_nodes(admin, [late], NodeShape())
    with env.policy() as policy:
        wait_for("the extender to see the new node", lambda: late in policy.cluster_state().nodes)
        result = policy.set_resource("deployed", 1, node=late)
        assert result.durable  # on the Node object, written with the ServiceAccount's token
    work = Workload(admin)
    pod = f"p{next(_names)}"
    # A gang member: in extender mode bound by the extender (pods/binding), as deploy/ sends
    # only gang members its bind.
    work.create(
        gang_of_one(pod, limits={result.resource: "1"}, scheduler_name=env.info.scheduler_name)
    )
    placed = work.wait([pod], timeout=60)
    assert placed[pod].node == late, placed[pod].reason
    assert work.node_resources(late, result.resource) == {
        "capacity": {result.resource: "1"},
        "allocatable": {result.resource: "1"},
    }
    metrics = env.metrics()
    binds = metric(metrics, "escher_extender_decisions_total", {"verb": "bind", "outcome": "bound"})
    # Extender mode: bound by the extender's bind, with pods/binding. Pure: by kube-scheduler.
    assert binds >= 1 if env.mode == "extender" else binds == 0
    # Nothing the extender did in the background was refused either.
    for reason in ("forbidden", "unauthorized"):
        labels = {"reason": reason}
        assert metric(metrics, "escher_writeback_failures_total", labels) == 0
        for resource in ("nodes", "pods"):
            restarts = {"resource": resource, "reason": reason}
            assert metric(metrics, "escher_watch_restarts_total", restarts) == 0
    work.delete([pod])


def test_what_the_role_does_not_allow_is_refused(env: Env) -> None:
    core = client.CoreV1Api(api_client(env.sa_kubeconfig))
    node = env.info.nodes[0]
    # A pod nobody schedules, to try to change.
    pod = f"p{next(_names)}"
    admin = Workload(api_client(env.info.kubeconfig))
    gates = ("example.com/other", "escher.io/gang")
    admin.create(pod_manifest(pod, scheduler_name="nobody", scheduling_gates=gates))
    relabel = {"metadata": {"labels": {"app": "hijacked"}}}
    reannotate = {"metadata": {"annotations": {"escher.io/gang": "hijacked"}}}
    touch = {"metadata": {"annotations": {"escher.io/requeued-at": "1"}}}
    fake_condition = {
        "status": {"conditions": [{"type": "PodScheduled", "status": "True", "reason": "x"}]}
    }
    refused: dict[str, tuple[Callable[[], object], str]] = {
        "delete a node": (lambda: core.delete_node(node), RBAC_REFUSAL),
        "patch a node's spec": (
            lambda: core.patch_node(node, {"spec": {"unschedulable": True}}),
            RBAC_REFUSAL,
        ),
        "list secrets": (lambda: core.list_secret_for_all_namespaces(), RBAC_REFUSAL),
        # The typed client wants a V1Pod; a plain manifest serialises the same.
        "create a pod": (
            lambda: core.create_namespaced_pod("default", cast(Any, pod_manifest(pod + "x"))),
            RBAC_REFUSAL,
        ),
        # Pure mode writes to no pod; extender mode may touch a pod it turned away
        # (extender/scheduling/requeue.py), and the admission policy holds it to that one
        # annotation.
        "change a pod's labels": (
            lambda: core.patch_namespaced_pod(pod, "default", relabel),
            RBAC_REFUSAL if env.mode == "pure" else TOUCH_REFUSAL,
        ),
        "change another annotation": (
            lambda: core.patch_namespaced_pod(pod, "default", reannotate),
            RBAC_REFUSAL if env.mode == "pure" else TOUCH_REFUSAL,
        ),
        # Extender mode may lift the gang gate (extender/gang/kube/lifter.py), nothing else.
        "lift another scheduling gate": (
            lambda: core.patch_namespaced_pod(pod, "default", lift("example.com/other")),
            RBAC_REFUSAL if env.mode == "pure" else SPEC_REFUSAL,
        ),
        "narrow a gated pod's nodeSelector": (
            lambda: core.patch_namespaced_pod(
                pod, "default", {"spec": {"nodeSelector": {"a": "b"}}}
            ),
            RBAC_REFUSAL if env.mode == "pure" else SPEC_REFUSAL,
        ),
        # Extender mode may nominate a node (extender/gang/kube/nominator.py), nothing else.
        "change a pod's status conditions": (
            lambda: core.patch_namespaced_pod_status(pod, "default", fake_condition),
            RBAC_REFUSAL if env.mode == "pure" else STATUS_REFUSAL,
        ),
    }
    if env.mode == "extender":
        touched = core.patch_namespaced_pod(pod, "default", touch)
        assert touched.metadata.annotations == {"escher.io/requeued-at": "1"}
        lifted = core.patch_namespaced_pod(pod, "default", lift("escher.io/gang"))
        assert [g.name for g in lifted.spec.scheduling_gates] == ["example.com/other"]
        nominate = {"status": {"nominatedNodeName": node}}
        nominated = core.patch_namespaced_pod_status(pod, "default", nominate)
        assert nominated.status.nominated_node_name == node
        # ...and say why a held gang member waits (extender/gang/kube/lifter.py tell).
        held = {"type": "escher.io/GangHeld", "status": "True", "reason": "GangCannotFit"}
        told = core.patch_namespaced_pod_status(pod, "default", {"status": {"conditions": [held]}})
        assert any(c.type == held["type"] for c in told.status.conditions or [])
    if env.mode == "pure":
        binding = client.V1Binding(
            metadata=client.V1ObjectMeta(name=pod),
            target=client.V1ObjectReference(kind="Node", name=node),
        )
        refused["bind a pod"] = (
            lambda: core.create_namespaced_pod_binding(pod, "default", binding),
            RBAC_REFUSAL,
        )
    try:
        for what, (call, why) in refused.items():
            with pytest.raises(ApiException) as e:
                call()
            assert e.value.status == 403, what
            assert why in json.loads(e.value.body or "{}").get("message", ""), (what, e.value.body)
    finally:
        admin.delete([pod])


def lift(gate: str) -> dict[str, Any]:
    """The strategic merge patch that removes one scheduling gate, as the lifter sends it."""
    return {"spec": {"schedulingGates": [{"name": gate, "$patch": "delete"}]}}


@pytest.mark.parametrize("env", ["extender"], indirect=True)
@pytest.mark.parametrize("hold", [False, True], ids=["room", "short-of-room"])
def test_a_gang_is_placed_with_nothing_beyond_the_role(env: Env, hold: bool) -> None:
    """A gang is bound whole with the role's grants alone: binding, and lifting the gang
    gate when the switch (the ConfigMap the extender writes with its own Role; here set by
    hand, as the extender does when gangs wait for room) had the policy hold its members."""
    core = client.CoreV1Api(api_client(env.info.kubeconfig))
    work = Workload(api_client(env.info.kubeconfig))
    deadline = time.monotonic() + 10
    while True:  # written by the extender at its first turn as leader: no gang waits
        try:
            switch = core.read_namespaced_config_map("escher-gang-gate", NAMESPACE)
            break
        except ApiException as e:
            assert e.status == 404 and time.monotonic() < deadline
            time.sleep(0.1)
    assert switch.data == {"hold": "false"}
    gang = f"g{next(_names)}"
    members = [f"{gang}-{i}" for i in range(3)]

    def manifest(name: str) -> Any:
        return pod_manifest(
            name,
            requests={"cpu": "1", "memory": "128Mi"},
            labels={"escher.io/gang": gang},
            annotations={"escher.io/gang-min": str(len(members))},
            scheduler_name=env.info.scheduler_name,
        )

    if hold:
        core.patch_namespaced_config_map("escher-gang-gate", NAMESPACE, {"data": {"hold": "true"}})

        def gated() -> bool:  # a dry run is admitted as a creation would be, and not stored
            probe = core.create_namespaced_pod("default", manifest(f"{gang}-probe"), dry_run="All")
            return [g.name for g in probe.spec.scheduling_gates or []] == ["escher.io/gang"]

        # The API server's policy parameters follow a watch.
        wait_for("the admission policy gating members", gated, timeout=30)
    before = env.metrics()
    lifts = metric(before, "escher_gang_lifts_total", {"outcome": "sent"})
    nominations = {
        outcome: metric(before, "escher_gang_nominations_total", {"outcome": outcome})
        for outcome in ("sent", "failed")
    }
    try:
        for name in members:
            created = core.create_namespaced_pod("default", manifest(name))
            gates = [g.name for g in created.spec.scheduling_gates or []]
            assert gates == (["escher.io/gang"] if hold else [])
        placed = work.wait(members, timeout=60)
        assert all(p.node for p in placed.values()), placed
        metrics = env.metrics()
        assert (
            metric(metrics, "escher_extender_decisions_total", {"verb": "bind", "outcome": "bound"})
            >= 3
        )
        lifted = metric(metrics, "escher_gang_lifts_total", {"outcome": "sent"}) - lifts
        assert lifted == (3 if hold else 0)
        # Held members are planned together and each nominated to its place before it is let
        # through; none of those nominations is refused. (Ungated members race with their own
        # binding: a nomination that arrives after the bind may fail, harmlessly.)
        sent = metric(metrics, "escher_gang_nominations_total", {"outcome": "sent"})
        assert sent - nominations["sent"] >= (3 if hold else 0)
        failed = metric(metrics, "escher_gang_nominations_total", {"outcome": "failed"})
        if hold:
            assert failed == nominations["failed"]
    finally:
        work.delete(members)
        if hold:
            core.patch_namespaced_config_map(
                "escher-gang-gate", NAMESPACE, {"data": {"hold": "false"}}
            )


def test_each_pod_is_marked_for_and_sent_only_the_exchanges_it_needs(env: Env) -> None:
    """Extender mode: the admission policy marks gang members (scheduling.escher.io/gang:
    filter, preempt; scheduling.escher.io/bind: bind) and pods with a preference
    (scheduling.escher.io/score: prioritize), and kube-scheduler (managedResources) sends each
    only those exchanges; a plain pod is scheduled and bound without a single exchange. Every
    pod it marks is moved to the profile that looks at every node, escher-scheduler-all-nodes;
    a plain pod stays on escher-scheduler, which samples. A pod created with its markers on
    that profile is sent the same and not patched (the API server's count of the policy's
    patches); one created with its markers on escher-scheduler is moved. A pod created with
    KubeRay's hard-coded scheduler-plugins-scheduler is taken too: marked and moved as a gang
    member, or moved to escher-scheduler, unmarked, when it needs no exchange. Pure mode marks
    nothing."""
    api = api_client(env.info.kubeconfig)
    work, core = Workload(api), client.CoreV1Api(api)
    n = next(_names)
    escher = env.info.scheduler_name
    all_nodes = f"{escher}-all-nodes"
    gang_marker, bind_marker, score_marker = KEYS.markers
    gang = {"escher.io/gang": f"solo-{n}"}
    one = {"escher.io/gang-min": "1"}
    prefer = {"escher.io/prefer": "kubernetes.io/os=linux"}
    pods = {
        f"plain-{n}": pod_manifest(f"plain-{n}", requests={"cpu": "100m"}, scheduler_name=escher),
        f"gang-{n}": pod_manifest(
            f"gang-{n}", requests={"cpu": "100m"}, labels=gang, annotations=one,
            scheduler_name=escher,
        ),
        f"cos-{n}": pod_manifest(
            f"cos-{n}", labels={"scheduling.x-k8s.io/pod-group": f"pg-{n}"}, scheduler_name=escher
        ),
        f"prefer-{n}": pod_manifest(
            f"prefer-{n}", requests={"cpu": "100m"}, annotations=prefer, scheduler_name=escher
        ),
        f"both-{n}": pod_manifest(
            f"both-{n}", labels={"escher.io/gang": f"both-{n}"}, annotations={**one, **prefer},
            scheduler_name=escher,
        ),
        # A pod for another scheduler is never marked: that one would count the markers.
        f"other-{n}": pod_manifest(
            f"other-{n}", labels={"escher.io/gang": f"o-{n}"}, scheduler_name="nobody"
        ),
        # Created with its markers and profile, as a job template may name them: untouched.
        f"marked-{n}": pod_manifest(
            f"marked-{n}", requests={"cpu": "100m"}, labels={"escher.io/gang": f"m-{n}"},
            annotations=one, limits=dict.fromkeys([gang_marker, bind_marker], "0"),
            scheduler_name=all_nodes,
        ),
        # ... with its markers on escher-scheduler: moved to the profile (one patch).
        f"moved-{n}": pod_manifest(
            f"moved-{n}", requests={"cpu": "100m"}, labels={"escher.io/gang": f"v-{n}"},
            annotations=one, limits=dict.fromkeys([gang_marker, bind_marker], "0"),
            scheduler_name=escher,
        ),
        # KubeRay's (docs/integrations.md): a gang member, and a pod of no gang.
        f"ray-{n}": pod_manifest(
            f"ray-{n}", requests={"cpu": "100m"},
            labels={"scheduling.x-k8s.io/pod-group": f"r-{n}"}, annotations=one,
            scheduler_name=GANG_SCHEDULER_NAME,
        ),
        f"ray-plain-{n}": pod_manifest(
            f"ray-plain-{n}", requests={"cpu": "100m"}, scheduler_name=GANG_SCHEDULER_NAME
        ),
    }  # fmt: skip
    count = "escher_extender_request_seconds_count"

    def calls(metrics: str) -> dict[str, float]:
        return {v: metric(metrics, count, {"verb": v}) for v in ("filter", "prioritize", "bind")}

    patched = "apiserver_mutating_admission_policy_check_total"
    marker_policy = {
        "error_type": "no_error",
        "policy": "escher-extender-marker",
        "policy_binding": "escher-extender-marker",
    }

    def patches() -> float:
        """How many times the API server has applied the marker policy's patch."""
        return metric(apimetrics.scrape(api), patched, marker_policy)

    def exchanges(name: str) -> dict[str, bool]:
        """Whether each verb was called while `name` alone was created and placed."""
        before = calls(env.metrics())
        work.create(pods[name])
        placed = work.wait([name], timeout=60)
        assert placed[name].node, placed
        after = calls(env.metrics())
        return {v: after[v] > before[v] for v in after}

    def profile(name: str) -> str:
        return str(core.read_namespaced_pod(name, "default").spec.scheduler_name)

    def markers(name: str) -> dict[str, dict[str, str]]:
        resources = core.read_namespaced_pod(name, "default").spec.containers[0].resources
        return {
            section: {k: v for k, v in (getattr(resources, section) or {}).items() if "/" in k}
            for section in ("limits", "requests")
        }

    try:
        extender = env.mode == "extender"
        none = {"filter": False, "prioritize": False, "bind": False}
        gang_member = {"filter": True, "prioritize": False, "bind": True}
        assert exchanges(f"plain-{n}") == none
        assert markers(f"plain-{n}") == {"limits": {}, "requests": {}}
        assert profile(f"plain-{n}") == escher
        for name, marks, sent in (
            (f"gang-{n}", [gang_marker, bind_marker], gang_member),
            (f"prefer-{n}", [score_marker], {"filter": False, "prioritize": True, "bind": False}),
            # Sent prioritize too, but the gang's filter passes one node (its reserved place),
            # and kube-scheduler scores no single feasible node.
            (f"both-{n}", [gang_marker, bind_marker, score_marker], gang_member),
        ):
            before = patches()
            assert exchanges(name) == (sent if extender else none), name
            want = dict.fromkeys(marks, "0") if extender else {}
            assert markers(name) == {"limits": want, "requests": want}, name
            assert patches() - before == (1 if extender else 0), name
            assert profile(name) == (all_nodes if extender else escher), name
        if extender:  # a pod carrying its markers is sent the same and not patched
            want = dict.fromkeys([gang_marker, bind_marker], "0")
            for name, patched_once in ((f"marked-{n}", False), (f"moved-{n}", True)):
                before = patches()
                assert exchanges(name) == gang_member, name
                assert markers(name) == {"limits": want, "requests": want}, name
                assert patches() - before == (1 if patched_once else 0), name
                assert profile(name) == all_nodes, name
            # KubeRay's name: every pod moved, in one patch; only the gang member marked.
            for name, marks, sent, moved_to in (
                (f"ray-{n}", [gang_marker, bind_marker], gang_member, all_nodes),
                (f"ray-plain-{n}", [], none, escher),
            ):
                before = patches()
                assert exchanges(name) == sent, name
                want = dict.fromkeys(marks, "0")
                assert markers(name) == {"limits": want, "requests": want}, name
                assert patches() - before == 1, name
                assert profile(name) == moved_to, name
        # Last: a Coscheduling member waits for its PodGroup, retried (filtered) meanwhile.
        work.create(pods[f"cos-{n}"])
        want = dict.fromkeys([gang_marker, bind_marker], "0") if extender else {}
        assert markers(f"cos-{n}") == {"limits": want, "requests": want}
        work.create(pods[f"other-{n}"])
        assert markers(f"other-{n}") == {"limits": {}, "requests": {}}
        if extender:  # every node advertises the markers, which occupy nothing
            node = core.read_node(work.wait([f"gang-{n}"], timeout=5)[f"gang-{n}"].node)
            shown = {m: node.status.allocatable.get(m, "0") for m in KEYS.markers}
            assert {m: quantity.capacity(q, field=m) for m, q in shown.items()} == dict.fromkeys(
                KEYS.markers, MARKER_CAPACITY
            )  # the API server says "1M"
    finally:
        work.delete(list(pods))


@pytest.mark.parametrize("env", ["extender"], indirect=True)
def test_the_verbs_answer_only_kube_schedulers_client_certificate(env: Env) -> None:
    """As deployed, the verbs (bind creates Bindings) take no caller but the holder of the
    client certificate the CA signed, on both their listeners: HTTP/2 (bind's) and HTTP/1.1
    (filter's and prioritize's); the policy listener does not serve them at all."""
    assert "--verbs-http1-port" in env.verbs_flags, "the overlay's two verbs listeners"
    body = {"PodName": "p", "PodNamespace": "default", "PodUID": "u", "Node": "node-0"}

    def call(verb: str, client: tuple[Path, Path] | None, base: str) -> httpx.Response:
        ctx = ssl.create_default_context(cafile=str(env.tls.ca))
        if client is not None:
            ctx.load_cert_chain(str(client[0]), str(client[1]))
        # Offering HTTP/2, as kube-scheduler's Go client does: each listener picks its own.
        with httpx.Client(verify=ctx, http2=True, timeout=10) as c:
            return c.post(f"{base}/{verb}", json=body)

    scheduler = (env.tls.client_cert, env.tls.client_key)
    for base, protocol in ((env.verbs_url, "HTTP/2"), (env.verbs_http1_url, "HTTP/1.1")):
        # The scheduler's certificate gets an answer: this pod was never filtered, so no bind.
        answer = call("bind", scheduler, base)
        assert answer.status_code == 200 and "was not filtered" in answer.json()["Error"]
        assert answer.http_version == protocol, base
        # Refused in the handshake; with TLS 1.3 the client learns it at its first read or
        # write after it.
        refused = (httpx.ConnectError, httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)
        for stranger in (None, (env.tls.rogue_cert, env.tls.rogue_key)):
            with pytest.raises(refused):
                call("bind", stranger, base)
    assert call("bind", None, env.url).status_code == 404


@pytest.mark.parametrize("env", ["extender"], indirect=True)
def test_kube_scheduler_refuses_a_certificate_from_another_ca(env: Env) -> None:
    admin = api_client(env.info.kubeconfig)
    with env.policy() as policy:
        resource = policy.set_resource("tls", 5).resource
    env.start_extender(env.tls.rogue_cert, env.tls.rogue_key)
    work = Workload(admin)
    pod = f"p{next(_names)}"
    try:
        work.create(  # a gang member: deploy/ sends the extender only those (and preferences)
            gang_of_one(pod, limits={resource: "1"}, scheduler_name=env.info.scheduler_name)
        )
        wait_for(
            "kube-scheduler to log the refused certificate",
            lambda: any("x509" in line for line in log_lines_about(env.scheduler_log, pod)),
        )
        line = next(x for x in log_lines_about(env.scheduler_log, pod) if "x509" in x)
        assert "certificate signed by unknown authority" in line
        assert work.placements([pod])[pod].node is None
    finally:
        work.delete([pod])
        env.start_extender(env.tls.cert, env.tls.key)


@pytest.mark.parametrize("env", ["extender"], indirect=True)
def test_an_unreachable_extender_leaves_the_pod_pending_and_is_logged(env: Env) -> None:
    admin = api_client(env.info.kubeconfig)
    with env.policy() as policy:
        resource = policy.set_resource("down", 5).resource
    env.stop_extender()
    work = Workload(admin)
    pod = f"p{next(_names)}"
    try:
        work.create(  # a gang member: deploy/ sends the extender only those (and preferences)
            gang_of_one(pod, limits={resource: "1"}, scheduler_name=env.info.scheduler_name)
        )
        wait_for(
            "kube-scheduler to log the connection error",
            lambda: any("connection refused" in x for x in log_lines_about(env.scheduler_log, pod)),
        )
        line = next(x for x in log_lines_about(env.scheduler_log, pod) if "connection refused" in x)
        # Filter, one pod at a time, is sent to the HTTP/1.1 listener.
        assert f"{env.verbs_http1_url}/filter" in line
        placement = work.placements([pod])[pod]
        assert placement.node is None
    finally:
        work.delete([pod])
        env.start_extender(env.tls.cert, env.tls.key)


@pytest.mark.parametrize("env", ["extender"], indirect=True)
def test_a_wrong_api_server_token_is_named_in_the_log_readiness_and_metrics(env: Env) -> None:
    bad = env.info.dir.parent / "wrong-token.kubeconfig"
    bad.write_text(render_kubeconfig(env.info.apiserver, "not-a-valid-token"))
    port = allocate_ports({"extender": None})["extender"]
    # Liveness is all it will ever reach: it cannot rebuild its ledger.
    record = env.run_extender("extender-wrong-token", kubeconfig=bad, port=port, tls=None,
                              ready="/healthz")  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            "the failure to be counted",
            lambda: (
                metric(
                    httpx.get(f"{url}/metrics").text,
                    "escher_startup_failures_total",
                    {"step": "sync", "reason": "unauthorized"},
                )
                >= 1
            ),
        )
        ready = httpx.get(f"{url}/readyz")
        assert ready.status_code == 503
        assert "(unauthorized)" in ready.json()["status"]
        assert "HTTP 401" in ready.json()["status"]
        lines = [json.loads(x) for x in record.log.read_text().splitlines() if x.startswith("{")]
        # The service's own: on a loaded machine the loop watch may warn first.
        warnings = [
            x["message"]
            for x in lines
            if x["level"] == "WARNING" and x["logger"] == "extender.service"
        ]
        assert warnings, record.log.read_text()
        # One line that says what is wrong, not the client's dump of headers.
        assert warnings[0].startswith(
            "building the ledger from the cluster failed (unauthorized): HTTP 401: Unauthorized"
        ), warnings[0]
    finally:
        env.stop(record)
