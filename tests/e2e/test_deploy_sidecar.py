"""deploy/overlays/sidecar on the real local control plane: the extender as a container of
escher-scheduler's pod, the verbs over plain HTTP on the pod's loopback.

The rendered overlay is applied with server-side apply to a real kube-apiserver. Then, as in
the pod, both processes run with one identity, a token of the pod's ServiceAccount
(escher-scheduler) from the TokenRequest API: kube-scheduler with the overlay's own
KubeSchedulerConfiguration (the extender's address is the overlay's loopback, only the port
made free; its leader election as the overlay sets it), and the extender with the flags of the
overlay's container (the verbs' port made free, on 127.0.0.1).

What is proven: the API server accepts every object with no Pod Security warning, and the
overlay has no extender Deployment, ServiceAccount or client certificate left; the shared
identity holds the extender's least-privilege set (tests/rbac.py) beside kube-scheduler's
roles, and that is enough for both: a gang member goes through filter and bind, a pod with a
preference through prioritize, an unschedulable pod gets kube-scheduler's own status
writes, all under that identity; and the admission policy still holds the identity's pod
patches to the extender's annotation and gate. That the service refuses plain verbs on an
address that is not loopback is tests/unit/test_settings.py's; the chart's `layout: sidecar`
is held to this overlay's objects by tests/process/test_process_helm.py.
"""

from __future__ import annotations

import itertools
import json
import os
import ssl
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from rbac import EXPECTED
from test_deploy import (
    BOOTSTRAP_GRANTS,
    TOUCH_REFUSAL,
    deploy_overlay,
    gang_of_one,
    metric,
)

from escher_harness import localcluster
from escher_harness.kubeclient import api_client
from escher_harness.localcluster import config as launcher
from escher_harness.localcluster.binaries import find_binaries, find_kubectl
from escher_harness.localcluster.config import SCHEDULER_ENV
from escher_harness.localcluster.errors import MissingBinaryError
from escher_harness.localcluster.health import wait_ready
from escher_harness.localcluster.pki import make_pki
from escher_harness.localcluster.ports import allocate_ports
from escher_harness.localcluster.processes import ProcessRecord, spawn, stop
from escher_harness.workload import Workload, pod_manifest
from extender.cli import build_parser, settings_of
from extender.core.pod import Keys
from extender.esl.client import PolicyClient

pytestmark = [pytest.mark.e2e, pytest.mark.cluster(nodes=2, kwok=False)]

NAMESPACE = "escher-system"
ACCOUNT = "escher-scheduler"
SCHEDULER = "escher-scheduler"
KEYS = Keys.for_domain("escher.io")
_names = itertools.count()

Doc = dict[str, Any]


@dataclass(frozen=True)
class Env:
    info: localcluster.ClusterInfo
    rendered: list[Doc]
    apply_warnings: str
    sa_kubeconfig: Path
    policy: str  # the extender's policy API (HTTPS)
    ca: Path
    token: str
    extender: ProcessRecord

    def metrics(self) -> str:
        return httpx.get(f"{self.policy}/metrics", verify=ssl.create_default_context(
            cafile=str(self.ca))).text  # fmt: skip


def pod_of(rendered: list[Doc]) -> Doc:
    (deployment,) = [
        d for d in rendered if d["kind"] == "Deployment" and d["metadata"]["name"] == SCHEDULER
    ]
    return dict(deployment["spec"]["template"]["spec"])


def extender_args(rendered: list[Doc]) -> list[str]:
    (container,) = [c for c in pod_of(rendered)["containers"] if c["name"] == "extender"]
    return list(container["args"])


def local_config(rendered: list[Doc], port: int, kubeconfig: Path, out: Path) -> Path:
    """The overlay's KubeSchedulerConfiguration as the pod runs it, with the verbs' port made
    free and the ServiceAccount's kubeconfig instead of the in-cluster one."""
    (configmap,) = [d for d in rendered if d["kind"] == "ConfigMap"]
    config = yaml.safe_load(configmap["data"]["config.yaml"])
    for extender in config["extenders"]:
        assert extender["urlPrefix"] == "http://127.0.0.1:8889", extender
        extender["urlPrefix"] = f"http://127.0.0.1:{port}"
    config["clientConnection"] = {"kubeconfig": str(kubeconfig), "qps": 50, "burst": 100}
    out.write_text(yaml.safe_dump(config))
    return out


def spawned(
    records: list[ProcessRecord], name: str, argv: list[str], port: int, health: str, logs: Path
) -> ProcessRecord:
    record = spawn(
        name,
        argv,
        log=logs / f"{name}.log",
        port=port,
        health_url=health,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        extra_env=SCHEDULER_ENV if name == SCHEDULER else {},
    )
    records.append(record)
    wait_ready(record, deadline=time.monotonic() + 90, timeout=90)
    return record


@pytest.fixture(scope="module")
def env(
    cluster: localcluster.ClusterInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    try:
        kubectl = find_kubectl()
    except MissingBinaryError as e:
        pytest.fail(str(e), pytrace=False)
    d = tmp_path_factory.mktemp("deploy-sidecar")
    rendered, warnings, sa_kubeconfig = deploy_overlay(
        kubectl, cluster, "sidecar", ACCOUNT, d / f"{ACCOUNT}.kubeconfig"
    )
    pki = make_pki(d / "ca")
    ports = allocate_ports({"policy": None, "verbs": None, "scheduler": None})
    records: list[ProcessRecord] = []
    logs = cluster.paths["logs"]
    try:
        # The overlay's flags, with the verbs' and the policy API's ports made free.
        flags = [
            a
            for a in extender_args(rendered)
            if not a.startswith(("--in-cluster", "--port", "--tls-", "--verbs-port", "--log-json"))
        ]
        serve = [sys.executable, "-m", "extender", "serve", *flags]
        serve += ["--kubeconfig", str(sa_kubeconfig), "--token", "policy-token"]
        serve += ["--port", str(ports["policy"]), "--verbs-port", str(ports["verbs"])]
        serve += ["--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key)]
        extender = spawned(
            records, "extender", serve, ports["policy"],
            f"https://127.0.0.1:{ports['policy']}/readyz", logs,
        )  # fmt: skip
        scheduler_config = local_config(
            rendered, ports["verbs"], sa_kubeconfig, d / "scheduler-config.yaml"
        )
        spawned(
            records,
            SCHEDULER,
            launcher.scheduler_command(
                find_binaries().kube_scheduler,
                config=scheduler_config,
                port=ports["scheduler"],
                feature_gates={},
            ),
            ports["scheduler"],
            f"https://127.0.0.1:{ports['scheduler']}/readyz",
            logs,
        )
        yield Env(
            cluster,
            rendered,
            warnings,
            sa_kubeconfig,
            f"https://127.0.0.1:{ports['policy']}",
            pki.ca,
            "policy-token",
            extender,
        )
    finally:
        for record in reversed(records):
            stop(record)


def test_the_objects_are_accepted_and_the_extender_has_no_workload_of_its_own(env: Env) -> None:
    assert env.apply_warnings == ""  # Pod Security "restricted": both containers meet it
    kinds = {(d["kind"], d["metadata"]["name"]) for d in env.rendered}
    assert ("Deployment", "escher-extender") not in kinds
    assert ("ServiceAccount", "escher-extender") not in kinds
    assert ("PodDisruptionBudget", "escher-extender") not in kinds
    pod = pod_of(env.rendered)
    assert [c["name"] for c in pod["containers"]] == ["kube-scheduler", "extender"]
    assert pod["serviceAccountName"] == ACCOUNT
    # No client certificate, no CA for kube-scheduler: nothing of the verbs' TLS is left.
    secrets = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets == {"escher-extender-tls"}
    parsed = settings_of(build_parser().parse_args(["serve", *extender_args(env.rendered)]))
    assert parsed.listen.verbs_plain and parsed.listen.verbs_host == "127.0.0.1"
    assert parsed.listen.verbs_certificate() is None and parsed.listen.verbs_client_ca_file is None
    # The Service reaches the extender's policy port in that pod, and no verbs port.
    (service,) = [d for d in env.rendered if d["kind"] == "Service"]
    assert service["spec"]["ports"] == [{"name": "https", "port": 8888, "targetPort": "policy"}]
    assert service["spec"]["selector"] == {"app.kubernetes.io/name": SCHEDULER}


def test_the_shared_identity_holds_the_extenders_least_privilege_set(env: Env) -> None:
    authorization = client.AuthorizationV1Api(api_client(env.sa_kubeconfig))
    review = authorization.create_self_subject_rules_review(
        client.V1SelfSubjectRulesReview(spec=client.V1SelfSubjectRulesReviewSpec(namespace="x"))
    )
    assert review.status is not None
    granted = {
        (group, resource, verb)
        for rule in review.status.resource_rules
        for group in rule.api_groups or []
        for resource in rule.resources or []
        for verb in rule.verbs
        if (group, resource) not in BOOTSTRAP_GRANTS
    }
    # The extender's set, beside kube-scheduler's own roles (system:kube-scheduler, ...).
    assert EXPECTED["extender"] <= granted
    assert ("", "nodes", "patch") not in granted  # neither may change a node but its status


def test_both_processes_schedule_with_the_one_identity(env: Env) -> None:
    admin = api_client(env.info.kubeconfig)
    # On every node: with one feasible node kube-scheduler skips scoring, prioritize too.
    with PolicyClient(env.policy, env.token, verify=str(env.ca)) as policy:
        resource = policy.set_resource("sidecar", 4).resource
    before = env.metrics()
    work = Workload(admin)
    gang, prefer, waiting = (f"{k}-{next(_names)}" for k in ("gang", "prefer", "waiting"))
    # A gang member: filter and bind. A preference: prioritize. Neither kube-scheduler's alone.
    work.create(gang_of_one(gang, limits={resource: "1"}, scheduler_name=SCHEDULER))
    work.create(
        pod_manifest(
            prefer,
            limits={resource: "1"},
            annotations={KEYS.pack: "sidecar"},
            scheduler_name=SCHEDULER,
        )
    )
    # No node has this: kube-scheduler writes its status (PodScheduled False) as the identity
    # the pod-touch policy holds.
    work.create(pod_manifest(waiting, limits={resource: "9"}, scheduler_name=SCHEDULER))
    placed = work.wait([gang, prefer], timeout=60)
    assert {placed[gang].node, placed[prefer].node} <= set(env.info.nodes), placed
    after = env.metrics()
    bound = {"verb": "bind", "outcome": "bound"}
    decisions = "escher_extender_decisions_total"
    assert metric(after, decisions, bound) - metric(before, decisions, bound) >= 1
    calls = "escher_extender_request_seconds_count"
    assert metric(after, calls, {"verb": "prioritize"}) > metric(
        before, calls, {"verb": "prioritize"}
    )
    core = client.CoreV1Api(admin)
    deadline = time.monotonic() + 30
    while True:
        status = core.read_namespaced_pod(waiting, "default").status
        conditions = {c.type: c for c in (status.conditions or [])} if status else {}
        if "PodScheduled" in conditions:
            break
        assert time.monotonic() < deadline, "kube-scheduler wrote no status for the waiting pod"
        time.sleep(0.2)
    assert conditions["PodScheduled"].status == "False"
    assert "Insufficient" in (conditions["PodScheduled"].message or "")


def test_the_policy_still_holds_the_identitys_pod_patches(env: Env) -> None:
    admin = api_client(env.info.kubeconfig)
    name = f"held-{next(_names)}"
    Workload(admin).create(pod_manifest(name, scheduler_name="nobody"))
    core = client.CoreV1Api(api_client(env.sa_kubeconfig))
    with pytest.raises(ApiException) as e:
        core.patch_namespaced_pod(name, "default", {"metadata": {"labels": {"x": "y"}}})
    assert e.value.status == 403 and TOUCH_REFUSAL in json.loads(e.value.body)["message"]
    # What the extender does itself is let through.
    patch = {"metadata": {"annotations": {"escher.io/requeued-at": "now"}}}
    core.patch_namespaced_pod(name, "default", patch)
