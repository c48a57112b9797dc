"""The Helm chart deploy/helm/escher-extender against the real helm (and kubectl's kustomize):

- `helm lint`, plain and `--strict`, passes with the defaults and with each documented values
  combination (ci/*-values.yaml, as charts lay them out for chart-testing);
- each combination renders what its values say (which objects, the extender's flags, the
  scheduler's configuration), and the objects refer to each other consistently (Secrets,
  roles, ServiceAccounts, selectors, the lease, the gang gate's switch) whatever the release,
  scheduler and domain names;
- values.schema.json is closed at every object level, and a wrong value fails the install
  naming the key;
- the defaults render deploy/overlays/extender's objects, mode=pure deploy/overlays/pure's and
  mode=dra deploy/overlays/dra's (normalising only what legitimately differs, each said where
  it is done), and the extender's grants are tests/rbac.py's EXPECTED set of its mode;
- the PodDisruptionBudget is there only with more than one replica, the ServiceMonitor and
  the PrometheusRule only when enabled, and the PrometheusRule's groups are
  deploy/monitoring/rules.yaml's;
- the generated certificates work: kube-scheduler's client, trusting the serving Secret's
  ca.crt, completes a mutual-TLS handshake with the extender for the Service's name.

tests/e2e/test_helm.py applies every combination to a real kube-apiserver (server-side dry
run) and installs and upgrades the chart there.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import re
import socket
import ssl
import subprocess
import threading
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from rbac import EXPECTED, triples

from escher_harness.localcluster.binaries import find_kubectl, find_tool
from escher_harness.localcluster.errors import MissingBinaryError
from escher_harness.localcluster.operators import GANG_SCHEDULER_NAME
from extender.cli import build_parser, settings_of
from extender.cluster.args import LeaderElectionArgs
from extender.core.pod import Keys
from extender.dra.objects import MANAGED_BY
from extender.listen import ListenArgs
from extender.scheduling.profile import problems
from extender.settings import Settings

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "escher-extender"
CI = sorted(CHART.glob("ci/*-values.yaml"))
RELEASE = "escher-extender"  # fullname = the release's: deploy/'s names
NAMESPACE = "escher-system"
# The labels the chart adds to deploy/'s own app.kubernetes.io/name, as Kueue's, Volcano's
# and KAI's charts do: which chart and release made an object, and its part.
CHART_LABELS = {
    "helm.sh/chart",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/component",
}
# kube-scheduler's defaults for clientConnection (SetDefaults_KubeSchedulerConfiguration),
# which deploy/'s configurations leave to it; the harness's ClusterSpec says the same.
KUBE_SCHEDULER_CLIENT = {"qps": 50, "burst": 100}

Doc = dict[str, Any]
Key = tuple[str, str, str]  # kind, namespace ("" for cluster-scoped), name


# ---- running the tools -------------------------------------------------------------------


@functools.cache
def tool(name: str) -> Path:
    try:
        return find_kubectl() if name == "kubectl" else find_tool(name)
    except MissingBinaryError as e:  # `make tools` builds helm: without it the run is broken
        pytest.fail(str(e), pytrace=False)


def helm(*args: str, values: Mapping[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    """helm with `args`; `values`, if given, as one more values file (on stdin)."""
    extra = ["-f", "-"] if values is not None else []
    return subprocess.run(
        [str(tool("helm")), *args, *extra],
        input=yaml.safe_dump(dict(values)) if values is not None else None,
        capture_output=True,
        text=True,
        timeout=120,
    )


def template_args(*files: Path, release: str = RELEASE) -> list[str]:
    return [
        "template", release, str(CHART), "--namespace", NAMESPACE,
        *(a for f in files for a in ("-f", str(f))),
    ]  # fmt: skip


def render(
    values: Mapping[str, Any] | None = None, *files: Path, release: str = RELEASE
) -> list[Doc]:
    r = helm(*template_args(*files, release=release), values=values)
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def refused(values: Mapping[str, Any]) -> str:
    """helm's error for values it must refuse."""
    r = helm(*template_args(), values=values)
    assert r.returncode != 0, f"accepted: {values}"
    return r.stderr


@functools.cache
def _kustomize(mode: str) -> str:
    r = subprocess.run(
        [str(tool("kubectl")), "kustomize", str(REPO / "deploy" / "overlays" / mode)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def kustomize(mode: str) -> list[Doc]:
    return [d for d in yaml.safe_load_all(_kustomize(mode)) if d]


# ---- reading what was rendered -----------------------------------------------------------


def key(doc: Doc) -> Key:
    meta = doc["metadata"]
    return doc["kind"], meta.get("namespace", ""), meta["name"]


def by_key(docs: list[Doc]) -> dict[Key, Doc]:
    out = {key(d): d for d in docs}
    assert len(out) == len(docs), "two objects of one kind, namespace and name"
    return out


def kinds(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def find(docs: list[Doc], kind: str, name: str) -> Doc:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def chart_defaults() -> Doc:
    return dict(yaml.safe_load((CHART / "values.yaml").read_text()))


def merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> Doc:
    """Helm's coalescing of a values file onto the defaults: maps merge, null deletes."""
    out = dict(base)
    for k, v in over.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merged(out[k], v)
        else:
            out[k] = v
    return out


def values_of(path: Path) -> Doc:
    return merged(chart_defaults(), yaml.safe_load(path.read_text()) or {})


def fullname(values: Mapping[str, Any], release: str = RELEASE) -> str:
    if values.get("fullnameOverride"):
        return str(values["fullnameOverride"])
    name = values.get("nameOverride") or "escher-extender"
    return release if name in release else f"{release}-{name}"


def deployment(docs: list[Doc], name: str) -> Doc:
    return find(docs, "Deployment", name)


def container(docs: list[Doc], name: str) -> Doc:
    """The Deployment `name`'s own container (the first: kube-scheduler's before a sidecar's),
    or, without such a Deployment, the extender's container in the pod it runs in (the
    sidecar layout: the scheduler's)."""
    pods = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in kinds(docs, "Deployment")}
    if name in pods:
        return dict(pods[name]["containers"][0])
    (c,) = [c for pod in pods.values() for c in pod["containers"] if c["name"] == "extender"]
    return dict(c)


def serve_args(docs: list[Doc], name: str = RELEASE) -> Any:
    """The extender's flags as `escher-extender serve` parses them."""
    return settings_of(build_parser().parse_args(["serve", *container(docs, name)["args"]]))


def scheduler_config(docs: list[Doc], scheduler: str = "escher-scheduler") -> Doc:
    (configmap,) = [
        d for d in kinds(docs, "ConfigMap") if d["metadata"]["name"].startswith(f"{scheduler}-")
    ]
    return dict(yaml.safe_load(configmap["data"]["config.yaml"]))


def granted(docs: list[Doc], namespace: str, sa: str, kind: str) -> list[Doc]:
    """The rules of the roles in `docs` bound to the ServiceAccount by bindings of `kind`."""
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"].endswith("Role")}
    rules: list[Doc] = []
    for binding in kinds(docs, kind):
        if {"kind": "ServiceAccount", "name": sa, "namespace": namespace} in binding["subjects"]:
            role = roles.get((binding["roleRef"]["kind"], binding["roleRef"]["name"]))
            rules += role["rules"] if role else []
    return rules


def walk(node: Any) -> Iterator[Any]:
    yield node
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    for child in children:
        yield from walk(child)


# ---- lint and the documented combinations ------------------------------------------------


def test_the_documented_combinations_are_there() -> None:
    names = {p.name.removesuffix("-values.yaml") for p in CI}
    assert {"default", "pure", "dra", "every-pod", "sidecar", "no-gang-gate", "single-replica",
            "cert-manager",
            "external-secrets", "monitoring"} <= names  # fmt: skip


@pytest.mark.parametrize("strict", [False, True], ids=["lint", "strict"])
@pytest.mark.parametrize("values", [None, *CI], ids=lambda p: p.name if p else "defaults")
def test_helm_lint_passes(values: Path | None, strict: bool) -> None:
    args = ["lint", str(CHART), *(["--strict"] if strict else [])]
    r = helm(*args, *(["-f", str(values)] if values else []))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 chart(s) failed" in r.stdout


@pytest.mark.parametrize("path", CI, ids=lambda p: p.name)
def test_each_combination_renders_what_its_values_say(path: Path) -> None:
    values = values_of(path)
    docs = render(None, path)
    name, scheduler = fullname(values), values["scheduler"]["name"]
    extender_mode = values["mode"] == "extender"
    sidecar = extender_mode and values["layout"] == "sidecar"
    dra_mode = values["mode"] == "dra"
    replicas = values["replicas"]
    cert_manager = values["tls"]["certManager"]["enabled"]
    generated = values["tls"]["generate"] and not cert_manager
    present = {(d["kind"], d["metadata"]["name"]) for d in docs}

    def has(kind: str, object_name: str) -> bool:
        return (kind, object_name) in present

    # Extender mode's grants and admission policies, each by its own value.
    assert has("ClusterRole", f"{name}-placement") == extender_mode
    assert has("ValidatingAdmissionPolicy", f"{name}-pod-touch") == extender_mode
    split = extender_mode and values["scope"] == "split"
    assert has("MutatingAdmissionPolicy", f"{name}-marker") == split
    assert has("MutatingAdmissionPolicyBinding", f"{name}-marker") == split
    # Dra mode's grant and the policy holding it to the service's own driver and label.
    assert has("ClusterRole", f"{name}-dra") == has("ClusterRoleBinding", f"{name}-dra") == dra_mode
    assert has("ValidatingAdmissionPolicy", f"{name}-dra-own-objects") == dra_mode
    assert has("ValidatingAdmissionPolicyBinding", f"{name}-dra-own-objects") == dra_mode
    gate = extender_mode and values["gangGate"]["enabled"]
    assert has("MutatingAdmissionPolicy", f"{name}-gang-gate") == gate
    assert has("Role", f"{name}-gang-gate") == gate
    # Replicas: leader election, and a budget only when there is a follower.
    election = values["leaderElection"]["enabled"]
    assert has("Role", f"{name}-leader-election") == election
    budget = values["podDisruptionBudget"]["enabled"] and replicas > 1 and not sidecar
    assert has("PodDisruptionBudget", name) == budget
    # The sidecar layout: the extender in the scheduler's pod, as its ServiceAccount.
    assert has("Deployment", name) == has("ServiceAccount", name) == (not sidecar)
    assert has("NetworkPolicy", name) == values["networkPolicy"]["enabled"]
    # TLS and the token.
    assert has("Secret", f"{name}-tls") == generated
    assert has("Secret", f"{scheduler}-client-tls") == (generated and extender_mode and not sidecar)
    assert has("Certificate", name) == cert_manager
    assert has("Certificate", f"{scheduler}-client") == (
        cert_manager and extender_mode and not sidecar
    )
    own_issuer = cert_manager and not values["tls"]["certManager"]["issuerRef"]["name"]
    assert has("Issuer", f"{name}-ca") == has("Certificate", f"{name}-ca") == own_issuer
    assert has("Secret", f"{name}-token") == (not values["token"]["existingSecret"])
    # Monitoring, only when asked for.
    metrics = values["metrics"]
    assert has("ServiceMonitor", name) == metrics["serviceMonitor"]["enabled"]
    assert has("PrometheusRule", name) == metrics["prometheusRule"]["enabled"]

    # The extender's flags.
    args = serve_args(docs, name)
    assert args.mode == values["mode"] and args.resource_domain == values["resourceDomain"]
    assert args.leader_election.leader_elect == election
    assert args.policy.objects == values["policyObjects"]
    assert args.leader_election.lease_name == (
        name if election else LeaderElectionArgs().lease_name
    )
    switch = f"{NAMESPACE}/{values['gangGate']['switchConfigMap']}"
    assert args.gang.gate_switch == (switch if gate else "")
    assert (args.listen.verbs_port is not None) == extender_mode
    # The verbs also over HTTP/1.1 where they are over mutual TLS (not on the sidecar's
    # loopback, plain HTTP/1.1 already).
    assert (args.listen.verbs_http1_port is not None) == (extender_mode and not sidecar)
    api = values["kubeAPI"]
    own = api["extender"]
    assert args.kube_qps == (own.get("qps") or api["qps"])
    assert args.kube_burst == (own.get("burst") or api["burst"])
    assert args.listen.verbs_host == ("127.0.0.1" if sidecar else None)
    if sidecar:
        # One pod, never two at once: its kube-scheduler calls its own extender.
        spec = deployment(docs, scheduler)["spec"]
        assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"
    else:
        spec = deployment(docs, name)["spec"]
        assert spec["replicas"] == replicas
        assert spec["strategy"]["type"] == ("RollingUpdate" if election else "Recreate")
        affinity = spec["template"]["spec"].get("affinity", {}).get("podAntiAffinity", {})
        spread = values["antiAffinity"] != "none" and replicas > 1
        assert [k.split("During")[0] for k in affinity] == (
            [values["antiAffinity"]] if spread else []
        )

    # The scheduler's configuration.
    config = scheduler_config(docs, scheduler)
    # Split: a second profile, looking at every node, for the pods the extender decides (the
    # marker policy moves them there); the scheduler's own samples as kube-scheduler does.
    split = values["mode"] == "extender" and values["scope"] == "split"
    profiles = {scheduler: None, **({f"{scheduler}-all-nodes": 100} if split else {})}
    assert {p["schedulerName"]: p.get("percentageOfNodesToScore") for p in config["profiles"]} == (
        profiles
    )
    every_pod = values["mode"] == "extender" and values["scope"] == "every-pod"
    assert config.get("percentageOfNodesToScore") == (100 if every_pod else None)
    assert config["leaderElection"]["resourceName"] == scheduler
    own = api["scheduler"]
    assert config["clientConnection"] == {
        "qps": own.get("qps") or api["qps"],
        "burst": own.get("burst") or api["burst"],
    }
    extenders = config.get("extenders", [])
    # Split: the gang members' entries (filter and preempt; bind, with a longer timeout) and
    # the preferences' (prioritize), each managing its marker; every-pod: every verb but bind
    # in one entry and bind in another, managing nothing.
    verbs = [sorted(k for k in e if k.endswith("Verb")) for e in extenders]
    managed = [e.get("managedResources") for e in extenders]
    # What the scheduler's init container checks before it starts (check-scheduler-config).
    keys_ = Keys.for_domain(values["resourceDomain"])
    assert problems(config, keys_, args.gang.wait_seconds) == []
    (check,) = deployment(docs, scheduler)["spec"]["template"]["spec"]["initContainers"]
    assert f"--kube-qps={args.kube_qps:g}" in check["command"]
    domain_flag = [a for a in check["command"] if a.startswith("--resource-domain=")]
    assert domain_flag == (
        []
        if values["resourceDomain"] == "escher.io"
        else [f"--resource-domain={values['resourceDomain']}"]
    )
    if split:
        keys = Keys.for_domain(values["resourceDomain"])
        assert verbs == [["filterVerb", "preemptVerb"], ["bindVerb"], ["prioritizeVerb"]]
        assert managed == [[{"name": m, "ignoredByScheduler": True}] for m in keys.markers]
    elif extender_mode:
        assert verbs == [["filterVerb", "preemptVerb", "prioritizeVerb"], ["bindVerb"]]
        assert managed == [None, None]
    if extender_mode:
        # The bind entry outwaits the barrier; the filter entry holds the cycle briefly.
        timeouts = [e["httpTimeout"] for e in extenders]
        assert timeouts[1] == f"{values['gangs']['waitSeconds'] + 15}s"
        assert args.gang.wait_seconds == values["gangs"]["waitSeconds"]
    else:
        assert extenders == []

    assert_consistent(docs, values)


def assert_consistent(docs: list[Doc], values: Mapping[str, Any], release: str = RELEASE) -> None:
    """The objects refer to one another as they must for the release to work."""
    name, scheduler = fullname(values, release), values["scheduler"]["name"]
    sidecar = values["mode"] == "extender" and values["layout"] == "sidecar"
    # Where the extender runs, and as whom: its own Deployment and ServiceAccount, or the
    # scheduler's (sidecar).
    pod_of, account = (scheduler, scheduler) if sidecar else (name, name)
    objects = by_key(docs)
    namespaced = {"ServiceAccount", "Role", "RoleBinding", "Deployment", "Service", "Secret",
                  "ConfigMap", "PodDisruptionBudget", "NetworkPolicy", "Certificate", "Issuer",
                  "ServiceMonitor", "PrometheusRule"}  # fmt: skip
    for (kind, namespace, object_name), doc in objects.items():
        # Every object in the release's namespace, but the scheduler's reading of the
        # API server's authentication settings, which is kube-system's.
        expected = "kube-system" if object_name.endswith("-authentication-reader") else NAMESPACE
        assert namespace == (expected if kind in namespaced else ""), (kind, object_name)
        if kind == "CustomResourceDefinition":  # <plural>.<group>: cluster-wide, not per release
            group = doc["spec"]["group"]
            assert group == values["resourceDomain"], object_name
            assert object_name == f"{doc['spec']['names']['plural']}.{group}"
        else:
            assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", object_name), object_name
            assert len(object_name) <= 63, object_name
        # The standard labels, on every object.
        labels = doc["metadata"]["labels"]
        assert CHART_LABELS | {"app.kubernetes.io/name"} <= labels.keys(), (kind, object_name)
        assert labels["app.kubernetes.io/instance"] == release
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert all(len(v) <= 63 for v in labels.values())

    secrets = {n for k, _, n in objects if k == "Secret"}
    secrets |= {d["spec"]["secretName"] for d in kinds(docs, "Certificate")}
    if not values["tls"]["generate"] and not values["tls"]["certManager"]["enabled"]:
        secrets |= {f"{name}-tls", f"{scheduler}-client-tls"}  # the operator's own
    secrets |= {values["token"]["existingSecret"]} - {""}
    for workload in {name: None, scheduler: None, pod_of: None}.keys() & {
        d["metadata"]["name"] for d in kinds(docs, "Deployment")
    }:
        d = deployment(docs, workload)
        pod = d["spec"]["template"]
        assert d["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        spec = pod["spec"]
        assert (NAMESPACE, spec["serviceAccountName"]) in {
            (ns, n) for k, ns, n in objects if k == "ServiceAccount"
        }
        for volume in spec["volumes"]:
            if "secret" in volume:
                assert volume["secret"]["secretName"] in secrets, volume
            else:
                assert ("ConfigMap", NAMESPACE, volume["configMap"]["name"]) in objects
        mounted = {m["name"] for c in spec["containers"] for m in c["volumeMounts"]}
        assert mounted == {v["name"] for v in spec["volumes"]}
        # Pod Security "restricted", which deploy/'s namespace enforces.
        assert spec["securityContext"]["runAsNonRoot"] is True
        for c in spec["containers"]:
            for env in c.get("env", []):
                if "valueFrom" in env:
                    assert env["valueFrom"]["secretKeyRef"]["name"] in secrets
            assert c["image"] and c["imagePullPolicy"]
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}

    extender_labels = deployment(docs, pod_of)["spec"]["template"]["metadata"]["labels"]
    scheduler_labels = deployment(docs, scheduler)["spec"]["template"]["metadata"]["labels"]
    service = find(docs, "Service", name)
    assert service["spec"]["selector"].items() <= extender_labels.items()
    for budget in kinds(docs, "PodDisruptionBudget"):
        assert budget["spec"]["selector"]["matchLabels"].items() <= extender_labels.items()
    for monitor in kinds(docs, "ServiceMonitor"):
        selector = monitor["spec"]["selector"]["matchLabels"]
        assert selector.items() <= service["metadata"]["labels"].items()
    for policy in kinds(docs, "NetworkPolicy"):
        assert policy["spec"]["podSelector"]["matchLabels"].items() <= extender_labels.items()
        (source,) = policy["spec"]["ingress"][0]["from"]
        if sidecar:  # nothing but the policy API's callers: the verbs are on loopback
            assert [r["from"] for r in policy["spec"]["ingress"]] == [
                [
                    {
                        "namespaceSelector": {
                            "matchLabels": values["networkPolicy"]["policyClientNamespaces"]
                        }
                    }
                ]
            ]
        else:  # the verbs' ports (HTTP/2, HTTP/1.1): the scheduler's pods only
            assert source["podSelector"]["matchLabels"].items() <= scheduler_labels.items()
            verbs, api = policy["spec"]["ingress"]
            assert verbs["ports"] == [{"port": p, "protocol": "TCP"} for p in (8889, 8890)]
            assert api["ports"] == [{"port": 8888, "protocol": "TCP"}]
    affinity = deployment(docs, pod_of)["spec"]["template"]["spec"].get("affinity")
    for term in walk(affinity):
        if isinstance(term, dict) and "labelSelector" in term:
            assert term["labelSelector"]["matchLabels"].items() <= extender_labels.items()

    # Every binding's role is rendered (or built in), every subject is a rendered account.
    accounts = {(ns, n) for k, ns, n in objects if k == "ServiceAccount"}
    for binding in kinds(docs, "RoleBinding") + kinds(docs, "ClusterRoleBinding"):
        ref = binding["roleRef"]
        builtin = ref["name"].startswith("system:") or ref["name"] == (
            "extension-apiserver-authentication-reader"
        )
        role_ns = binding["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
        assert builtin or (ref["kind"], role_ns, ref["name"]) in objects, binding
        for subject in binding["subjects"]:
            assert (subject["namespace"], subject["name"]) in accounts, subject

    # What the extender's flags name exists and is granted.
    args = serve_args(docs, name)
    if args.leader_election.leader_elect:
        role = find(docs, "Role", f"{name}-leader-election")
        assert args.leader_election.lease_namespace == NAMESPACE
        assert [args.leader_election.lease_name] in [r.get("resourceNames") for r in role["rules"]]
    if args.gang.gate_switch:
        ns, switch = args.gang.gate_switch.split("/")
        binding = find(docs, "MutatingAdmissionPolicyBinding", f"{name}-gang-gate")
        assert binding["spec"]["paramRef"] == {
            "name": switch, "namespace": ns, "parameterNotFoundAction": "Allow",
        }  # fmt: skip
        role = find(docs, "Role", f"{name}-gang-gate")
        assert [switch] in [r.get("resourceNames") for r in role["rules"]]
    if args.listen.verbs_port is not None and sidecar:
        # Plain HTTP on the pod's loopback, never a port of the pod's or the Service's.
        assert args.listen.verbs_plain and args.listen.verbs_host == "127.0.0.1"
        assert args.listen.verbs_certificate() is None and args.listen.verbs_client_ca_file is None
        assert args.listen.verbs_http1_port is None
        ports = [p for c in deployment(docs, pod_of)["spec"]["template"]["spec"]["containers"]
                 for p in c["ports"]]  # fmt: skip
        assert args.listen.verbs_port not in [p["containerPort"] for p in ports]
    elif args.listen.verbs_port is not None:
        c = container(docs, name)
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert (ports["verbs"], ports["verbs-http1"]) == (
            args.listen.verbs_port,
            args.listen.verbs_http1_port,
        )
        assert args.listen.verbs_http2 and args.listen.verbs_http1_port not in (
            args.listen.port,
            args.listen.verbs_port,
        )
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        assert str(args.listen.verbs_client_ca_file) == f"{mounts['client-ca']}/ca.crt"
        # The Service passes both verbs ports on, as numbered in the scheduler's URLs.
        assert [p for p in service["spec"]["ports"] if p["name"].startswith("verbs")] == [
            {"name": n, "port": ports[n], "targetPort": n} for n in ("verbs", "verbs-http1")
        ]
    # The extender's ServiceAccount may do exactly its mode's set (in the sidecar layout,
    # beside kube-scheduler's built-in roles, which are not rendered).
    cluster_wide = triples(granted(docs, NAMESPACE, account, "ClusterRoleBinding"))
    # The policy CRDs' group is the resource domain.
    expected = {
        (args.resource_domain if g == "escher.io" else g, r, v) for g, r, v in EXPECTED[args.mode]
    }
    assert cluster_wide == expected
    for policy in kinds(docs, "ValidatingAdmissionPolicy"):
        (condition,) = policy["spec"]["matchConditions"]
        user = f"system:serviceaccount:{NAMESPACE}:{account}"
        assert condition["expression"] == f'request.userInfo.username == "{user}"'
    if args.mode == "dra":
        # The driver, the domain and the label the extender publishes under.
        policy = find(docs, "ValidatingAdmissionPolicy", f"{name}-dra-own-objects")
        checks = [" ".join(v["expression"].split()) for v in policy["spec"]["validations"]]
        driver = args.dra.driver_name(args.resource_domain)
        assert f"variables.subject.spec.driver == '{driver}'" in checks[1]
        assert f"startsWith('{args.resource_domain}/')" in checks[2]
        ours = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}["ours"]
        assert all(f"'{part}'" in ours for part in MANAGED_BY)

    # The scheduler calls the Service's verbs ports with the mounted files, under its name:
    # the entries called one pod at a time (filter, preempt, prioritize) the HTTP/1.1 one,
    # bind the HTTP/2 one, where gang members are held; with scope every-pod all the HTTP/2
    # one (check-scheduler-config finds the bind entry by the filter entry's urlPrefix).
    config = scheduler_config(docs, scheduler)
    assert config["leaderElection"]["resourceNamespace"] == NAMESPACE
    role = find(docs, "Role", f"{scheduler}-leader-election")
    assert [config["leaderElection"]["resourceName"]] in [
        r.get("resourceNames") for r in role["rules"]
    ]
    for extender in config.get("extenders", []):
        if sidecar:
            assert extender["urlPrefix"] == f"http://127.0.0.1:{args.listen.verbs_port}"
            assert "tlsConfig" not in extender and "enableHTTPS" not in extender
            continue
        http1 = values["scope"] == "split" and "bindVerb" not in extender
        port = {p["name"]: p["port"] for p in service["spec"]["ports"]}[
            "verbs-http1" if http1 else "verbs"
        ]
        assert extender["urlPrefix"] == f"https://{name}.{NAMESPACE}.svc:{port}"
        c = container(docs, scheduler)
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        assert extender["tlsConfig"] == {
            "caFile": f"{mounts['extender-ca']}/ca.crt",
            "certFile": f"{mounts['client-tls']}/tls.crt",
            "keyFile": f"{mounts['client-tls']}/tls.key",
        }
    for policy in kinds(docs, "MutatingAdmissionPolicy"):
        conditions = {c["name"]: c["expression"] for c in policy["spec"]["matchConditions"]}
        # The marker policy takes KubeRay's hard-coded name too (docs/integrations.md).
        kuberay = [GANG_SCHEDULER_NAME] if policy["metadata"]["name"].endswith("-marker") else []
        profiles = [p["schedulerName"] for p in config["profiles"]]
        names = ", ".join(f'"{n}"' for n in [*profiles, *kuberay])
        expression = " ".join(conditions["for-escher-scheduler"].split())
        assert expression == f"object.spec.schedulerName in [{names}]"
        # As deploy/'s: none runs again after its own patch (docs/deployment.md, the cost).
        assert policy["spec"]["reinvocationPolicy"] == "Never", policy["metadata"]["name"]


def test_another_release_name_renames_everything_consistently() -> None:
    values = {"scheduler": {"name": "batch-scheduler"}}
    docs = render(values, release="team-a")
    name = "team-a-escher-extender"
    assert fullname(chart_defaults(), "team-a") == name
    assert {d["metadata"]["name"] for d in docs} >= {name, "batch-scheduler"}
    assert not [d for d in docs if "escher-scheduler" in d["metadata"]["name"]]
    assert_consistent(docs, merged(chart_defaults(), values), "team-a")
    service = find(docs, "Service", name)
    assert service["spec"]["selector"] == {
        "app.kubernetes.io/name": "escher-extender",
        "app.kubernetes.io/instance": "team-a",
    }
    args = serve_args(docs, name)
    assert args.leader_election.lease_name == name
    config = scheduler_config(docs, "batch-scheduler")
    assert [e["urlPrefix"] for e in config["extenders"]] == [
        f"https://{name}.{NAMESPACE}.svc:{port}" for port in (8890, 8889, 8890)
    ]
    # nameOverride and fullnameOverride, as the standard helpers have them.
    renamed = render({"fullnameOverride": "escher"}, release="team-a")
    assert find(renamed, "Deployment", "escher")
    assert find(render({"nameOverride": "esch"}, release="team-a"), "Deployment", "team-a-esch")


# ---- the values schema ------------------------------------------------------------------


def schema() -> Doc:
    return dict(json.loads((CHART / "values.schema.json").read_text()))


def test_the_schema_is_draft_07_and_closed_at_every_object_level() -> None:
    root = schema()
    assert root["$schema"] == "http://json-schema.org/draft-07/schema#"
    for node in walk(root):
        if isinstance(node, dict) and node.get("type") == "object":
            # Records name their keys and take no other; maps of free keys (labels,
            # nodeSelector, quantities) say what their values must be.
            assert "additionalProperties" in node, node
            if "properties" in node:
                assert node["additionalProperties"] is False, node
            else:
                assert isinstance(node["additionalProperties"], dict), node


def test_every_default_value_is_in_the_schema() -> None:
    def keys(values: Mapping[str, Any], props: Mapping[str, Any], path: str) -> None:
        for k, v in values.items():
            assert k in props, f"{path}{k} is not in values.schema.json"
            if isinstance(v, Mapping) and "properties" in props[k]:
                keys(v, props[k]["properties"], f"{path}{k}.")

    keys(chart_defaults(), schema()["properties"], "")


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"replicas": "two"}, "'/replicas': got string, want integer"),
        ({"replicas": 0}, "'/replicas'"),
        ({"mode": "bogus"}, "'/mode': value must be one of 'extender', 'pure', 'dra'"),
        ({"scope": "some"}, "'/scope'"),
        ({"replica": 2}, "additional properties 'replica' not allowed"),
        ({"tls": {"certManager": {"enable": True}}}, "'/tls/certManager': additional prop"),
        ({"tls": {"generate": "yes"}}, "'/tls/generate'"),
        ({"kubeAPI": {"extender": {"qps": 0}}}, "'/kubeAPI/extender/qps'"),
        ({"kubeAPI": {"burst": 1.5}}, "'/kubeAPI/burst'"),
        ({"resourceDomain": "Escher_IO"}, "'/resourceDomain'"),
        ({"resourceDomain": "scheduling.kubernetes.io"}, "'/resourceDomain'"),
        ({"image": {"pullPolicy": "Sometimes"}}, "'/image/pullPolicy'"),
        ({"image": {"digest": "latest"}}, "'/image/digest'"),
        ({"resources": {"requests": {"cpu": "lots"}}}, "'/resources/requests/cpu'"),
        ({"scheduler": {"name": "Escher Scheduler"}}, "'/scheduler/name'"),
        ({"scheduler": {"image": {"tag": ""}}}, "'/scheduler/image/tag'"),
        ({"podDisruptionBudget": {"minAvailable": "half"}}, "'/podDisruptionBudget/minAvailab"),
        ({"tolerations": [{"key": "a", "operator": "Maybe"}]}, "'/tolerations/0/operator'"),
        ({"metrics": {"serviceMonitor": {"interval": "often"}}}, "'/metrics/serviceMonitor/int"),
        ({"antiAffinity": "soft"}, "'/antiAffinity'"),
        ({"fullnameOverride": "a" * 48}, "'/fullnameOverride'"),
        ({"scheduler": {"name": "s" * 41}}, "'/scheduler/name'"),
    ],
    ids=lambda v: json.dumps(v) if isinstance(v, dict) else "",
)
def test_a_wrong_value_fails_naming_the_key(values: Doc, named: str) -> None:
    error = refused(values)
    assert "values don't meet the specifications of the schema" in error
    assert named in error, error


def test_the_longest_names_the_schema_takes_keep_every_object_name_within_63() -> None:
    longest = {"fullnameOverride": "a" * 47, "scheduler": {"name": "s" * 40}}
    lengths = []
    for path in (CHART / "ci" / "default-values.yaml", CHART / "ci" / "cert-manager-values.yaml"):
        docs = render(longest, path)
        assert_consistent(docs, merged(values_of(path), longest))  # every name within 63
        lengths += [len(d["metadata"]["name"]) for d in docs]
    assert max(lengths) == 63  # the limits are no tighter than they need be


def test_more_replicas_without_leader_election_are_refused() -> None:
    error = refused({"replicas": 2, "leaderElection": {"enabled": False}})
    assert "replicas: 2 replicas need leaderElection.enabled" in error


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"layout": "sidecar", "mode": "pure"}, "layout: sidecar puts the extender beside"),
        ({"layout": "sidecar", "mode": "dra"}, "it needs mode extender, not dra"),
        ({"layout": "sidecar", "scheduler": {"replicas": 2}}, "scheduler.replicas: 2 with layout"),
        ({"layout": "beside"}, "'/layout'"),
    ],
    ids=["pure", "dra", "two-schedulers", "unknown"],
)
def test_a_sidecar_only_beside_one_kube_scheduler_in_extender_mode(values: Doc, named: str) -> None:
    """kube-scheduler calls the extender of its own pod: a second scheduler replica's could be
    the extender that leads while this one's kube-scheduler does; without the verbs (pure, dra)
    there is nothing to call."""
    assert named in refused(values)


# ---- replicas, the budget, monitoring ----------------------------------------------------


@pytest.mark.parametrize("replicas", [1, 2, 3])
@pytest.mark.parametrize("enabled", [True, False])
def test_the_disruption_budget_is_there_only_with_more_than_one_replica(
    replicas: int, enabled: bool
) -> None:
    docs = render(
        {
            "replicas": replicas,
            "leaderElection": {"enabled": replicas > 1},
            "podDisruptionBudget": {"enabled": enabled},
        }
    )
    budgets = kinds(docs, "PodDisruptionBudget")
    assert len(budgets) == (enabled and replicas > 1)
    for budget in budgets:
        assert budget["spec"]["minAvailable"] == 1
        assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    by_max = render({"podDisruptionBudget": {"maxUnavailable": "50%"}})
    (budget,) = kinds(by_max, "PodDisruptionBudget")
    assert "minAvailable" not in budget["spec"] and budget["spec"]["maxUnavailable"] == "50%"


@pytest.mark.parametrize("service_monitor", [False, True])
@pytest.mark.parametrize("prometheus_rule", [False, True])
def test_monitoring_objects_only_when_enabled(service_monitor: bool, prometheus_rule: bool) -> None:
    docs = render(
        {
            "metrics": {
                "serviceMonitor": {"enabled": service_monitor},
                "prometheusRule": {"enabled": prometheus_rule},
            }
        }
    )
    assert len(kinds(docs, "ServiceMonitor")) == service_monitor
    assert len(kinds(docs, "PrometheusRule")) == prometheus_rule


MONITORING = REPO / "deploy" / "monitoring"


def test_the_prometheus_rule_carries_rules_yaml_and_the_copy_has_not_drifted() -> None:
    # .Files.Get reads only the chart's own files: files/rules.yaml is a copy of the one
    # promtool checks and tests (tests/process/test_process_monitoring.py), kept equal here.
    copy_, source = CHART / "files" / "rules.yaml", MONITORING / "rules.yaml"
    assert copy_.read_bytes() == source.read_bytes(), f"copy {source} to {copy_}"
    docs = render({"metrics": {"prometheusRule": {"enabled": True, "labels": {"a": "b"}}}})
    (rule,) = kinds(docs, "PrometheusRule")
    assert rule["spec"] == yaml.safe_load((MONITORING / "rules.yaml").read_text())
    assert rule["metadata"]["labels"]["a"] == "b"
    # The same object as deploy/monitoring/prometheusrule.yaml, bar the chart's labels.
    wrapped = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    wrapped["metadata"]["labels"]["a"] = "b"
    assert normalise_chart(rule) == wrapped


def test_the_service_monitor_scrapes_the_extender_as_the_rules_expect() -> None:
    docs = render({"metrics": {"serviceMonitor": {"enabled": True}}}, release="team-a")
    (monitor,) = kinds(docs, "ServiceMonitor")
    name = "team-a-escher-extender"
    service = find(docs, "Service", name)
    assert monitor["spec"]["selector"]["matchLabels"].items() <= (
        service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["scheme"] == "https" and endpoint["path"] == "/metrics"
    # Verified against the CA of the serving certificate, for the name it carries.
    assert endpoint["tlsConfig"] == {
        "serverName": f"{name}.{NAMESPACE}.svc",
        "ca": {"secret": {"name": f"{name}-tls", "key": "ca.crt"}},
    }
    # The alerts select job="escher-extender", whatever the Service is called.
    rules = yaml.safe_load((MONITORING / "rules.yaml").read_text())
    jobs = {
        m
        for g in rules["groups"]
        for r in g["rules"]
        for m in re.findall(r'job="([^"]+)"', r["expr"])
    }
    (relabel,) = endpoint["relabelings"]
    assert relabel == {"action": "replace", "targetLabel": "job", "replacement": "escher-extender"}
    assert jobs == {relabel["replacement"]}


# ---- the defaults are deploy/'s objects --------------------------------------------------


def strip_chart_labels(node: Any) -> None:
    """Drop the chart's standard labels wherever labels or selectors are, and labels left
    empty (deploy/'s admission policies have none)."""
    if isinstance(node, list):
        for item in node:
            strip_chart_labels(item)
    elif isinstance(node, dict):
        for field in ("labels", "matchLabels"):
            if isinstance(node.get(field), dict):
                for label in CHART_LABELS:
                    node[field].pop(label, None)
                if not node[field]:
                    del node[field]
        for value in node.values():
            strip_chart_labels(value)


def effective_args(args: list[str]) -> Doc:
    """The settings the extender's flags give: what the chart states explicitly and deploy/
    leaves to Settings' defaults (the lease's name, the domain, the API budget) compares
    equal."""
    return settings_of(build_parser().parse_args(["serve", *args])).model_dump(mode="json")


def normalise_workload(doc: Doc, config_name: str) -> None:
    spec = doc["spec"]["template"]["spec"]
    # Volumes and mounts are maps keyed by name (their patchMergeKey): their order means
    # nothing, and kustomize's strategic merge puts the overlay's first.
    spec["volumes"] = sorted(spec["volumes"], key=lambda v: v["name"])
    for volume in spec["volumes"]:
        if "configMap" in volume:
            volume["configMap"]["name"] = config_name
    for c in spec["containers"]:
        c["volumeMounts"] = sorted(c["volumeMounts"], key=lambda m: m["name"])
        if "args" in c:
            c["args"] = effective_args(c["args"])


def collapse_cel(node: Any) -> None:
    """Whitespace runs in CEL expressions as one space: CEL ignores whitespace between
    tokens, and kustomize's YAML writer re-folds a `>-` scalar whose lines are more indented,
    adding a blank line (deploy/'s files themselves parse as the chart renders them)."""
    for item in walk(node):
        if isinstance(item, dict) and isinstance(item.get("expression"), str):
            item["expression"] = " ".join(item["expression"].split())


def normalise_chart(doc: Doc) -> Doc:
    doc = copy.deepcopy(doc)
    strip_chart_labels(doc)
    collapse_cel(doc)
    if doc["kind"] == "Deployment":
        template = doc["spec"]["template"]["metadata"]
        # The chart's checksums roll a pod when its configuration or generated certificates
        # change; kustomize renames the ConfigMap instead (below), deploy/'s Secrets are the
        # operator's.
        annotations = template.pop("annotations", {})
        assert all(k.startswith("checksum/") for k in annotations), annotations
        for c in doc["spec"]["template"]["spec"]["containers"]:
            # The chart states the pull policy (image.pullPolicy); for a tagged image the API
            # server defaults deploy/'s to the same IfNotPresent.
            if c.pop("imagePullPolicy") != "IfNotPresent":
                c["imagePullPolicy"] = "changed"
        normalise_workload(doc, "escher-scheduler-config")
    if doc["kind"] == "CustomResourceDefinition":
        # Kept on uninstall, with the policies they hold; deploy/'s are kubectl's to delete.
        assert doc["metadata"].pop("annotations") == {"helm.sh/resource-policy": "keep"}
    if doc["kind"] == "Service":  # a selector of bare labels, no matchLabels
        strip_chart_labels({"labels": doc["spec"]["selector"]})
    if doc["kind"] == "ConfigMap":
        config = yaml.safe_load(doc["data"]["config.yaml"])
        doc["data"]["config.yaml"] = config
    return doc


def normalise_kustomize(doc: Doc) -> Doc:
    doc = copy.deepcopy(doc)
    collapse_cel(doc)
    # kustomize's configMapGenerator suffixes the name with a hash of the data, which holds
    # deploy/'s comments: the chart names it plainly and rolls the pods by checksum.
    hashed = re.compile(r"^(escher-scheduler-config)-[a-z0-9]{10}$")
    if doc["kind"] == "ConfigMap":
        doc["metadata"]["name"] = hashed.sub(r"\1", doc["metadata"]["name"])
        config = yaml.safe_load(doc["data"]["config.yaml"])
        # deploy/ leaves kube-scheduler's API budget to its defaults; the chart states it
        # (kubeAPI), defaulting to the same figures.
        config.setdefault("clientConnection", dict(KUBE_SCHEDULER_CLIENT))
        doc["data"]["config.yaml"] = config
    if doc["kind"] == "Deployment":
        normalise_workload(doc, "escher-scheduler-config")
    return doc


@pytest.mark.parametrize(
    ("overlay", "values"),
    [
        ("extender", {}),
        ("pure", {"mode": "pure"}),
        ("dra", {"mode": "dra"}),
        ("sidecar", {"layout": "sidecar"}),
    ],
    ids=["extender", "pure", "dra", "sidecar"],
)
def test_the_defaults_render_the_kustomize_overlays_objects(overlay: str, values: Doc) -> None:
    chart = render(values)
    deploy = kustomize(overlay)
    # The namespace is not the chart's: Helm keeps the release's record in it, so it exists
    # before the install (`--create-namespace`, then the Pod Security labels deploy/'s
    # namespace.yaml sets, as docs/deployment.md says).
    (namespace,) = kinds(deploy, "Namespace")
    assert namespace["metadata"]["name"] == NAMESPACE
    deploy = [d for d in deploy if d["kind"] != "Namespace"]
    # The Secrets are the operator's with deploy/ (docs/deployment.md, "TLS"); the chart
    # generates them, with the names deploy/'s pods mount.
    secrets = {d["metadata"]["name"] for d in kinds(chart, "Secret")}
    # kube-scheduler's client certificate: for the verbs' mutual TLS, not on the sidecar's
    # loopback.
    client = {"escher-scheduler-client-tls"} if overlay == "extender" else set()
    assert secrets == {"escher-extender-tls", "escher-extender-token"} | client
    chart = [d for d in chart if d["kind"] != "Secret"]

    ours = by_key([normalise_chart(d) for d in chart])
    theirs = by_key([normalise_kustomize(d) for d in deploy])
    assert sorted(ours) == sorted(theirs)
    for k in theirs:
        if "labels" not in theirs[k]["metadata"]:
            # deploy/'s admission policies and generated ConfigMap carry no labels; the chart
            # labels every object, beyond its own set with the name only.
            assert ours[k]["metadata"].pop("labels").keys() == {"app.kubernetes.io/name"}, k
        assert ours[k] == theirs[k], k


def test_the_chart_adds_labels_to_deploys_and_changes_none() -> None:
    chart = by_key(render())
    paths = [
        ("metadata", "labels"),
        ("spec", "selector"),  # a Service's
        ("spec", "selector", "matchLabels"),
        ("spec", "podSelector", "matchLabels"),
        ("spec", "template", "metadata", "labels"),
    ]
    for k, doc in by_key(kustomize("extender")).items():
        if k[0] == "Namespace":
            continue
        ours = chart[(k[0], k[1], hashless(k[2]))]
        for path in paths:
            theirs: Any = doc
            mine: Any = ours
            for step in path:
                theirs, mine = (theirs or {}).get(step), (mine or {}).get(step)
            if isinstance(theirs, dict) and "matchLabels" not in theirs:
                assert isinstance(mine, dict) and theirs.items() <= mine.items(), (k, path)
                assert mine.keys() - theirs.keys() <= CHART_LABELS, (k, path)


def hashless(name: str) -> str:
    return re.sub(r"^(escher-scheduler-config)-[a-z0-9]{10}$", r"\1", name)


def test_the_chart_version_and_images_are_the_packages() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert chart["appVersion"] == version
    docs = render()
    assert container(docs, RELEASE)["image"] == f"escher-extender:{version}"
    # By digest: the tag stays for the reader, the digest decides.
    digest = "sha256:" + "ab" * 32
    docs = render({"image": {"repository": "reg.example/escher", "tag": "9.9", "digest": digest}})
    assert container(docs, RELEASE)["image"] == f"reg.example/escher:9.9@{digest}"


# ---- the API budgets, the domain ---------------------------------------------------------


def budgets(docs: list[Doc]) -> tuple[tuple[float, int], tuple[float, int]]:
    args = serve_args(docs)
    client = scheduler_config(docs)["clientConnection"]
    return (client["qps"], client["burst"]), (args.kube_qps, args.kube_burst)


def test_the_api_budgets_default_equal_and_each_can_be_set() -> None:
    defaults = Settings.model_fields
    extender_defaults = (defaults["kube_qps"].default, defaults["kube_burst"].default)
    assert budgets(render()) == (
        (KUBE_SCHEDULER_CLIENT["qps"], KUBE_SCHEDULER_CLIENT["burst"]),
        extender_defaults,
    )
    assert extender_defaults == (KUBE_SCHEDULER_CLIENT["qps"], KUBE_SCHEDULER_CLIENT["burst"])
    # The shared figures move both; a component's own moves only it.
    assert budgets(render({"kubeAPI": {"qps": 1000000, "burst": 2000000}})) == (
        (1000000, 2000000),
        (1000000.0, 2000000),
    )
    assert budgets(render({"kubeAPI": {"qps": 12.5, "extender": {"burst": 30}}})) == (
        (12.5, 100),
        (12.5, 30),
    )
    assert budgets(render({"kubeAPI": {"scheduler": {"qps": 300, "burst": 600}}})) == (
        (300, 600),
        (50.0, 100),
    )


@pytest.mark.parametrize("layout", ["service", "sidecar"])
def test_the_slow_client_bounds_reach_the_extender(
    layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """connections.* become the extender's settings, on every listener it opens; the
    defaults are the extender's own."""
    defaults = ListenArgs.model_fields
    for given, want in (
        ({}, (defaults["header_timeout_seconds"].default, defaults["body_timeout_seconds"].default,
              defaults["max_pending_connections"].default)),
        ({"headerTimeoutSeconds": 2.5, "bodyTimeoutSeconds": 7, "maxPending": 40},
         (2.5, 7.0, 40)),
    ):  # fmt: skip
        docs = render({"layout": layout, "connections": given})
        env = {e["name"]: e.get("value") for e in container(docs, RELEASE)["env"]}
        for name in ("HEADER_TIMEOUT_SECONDS", "BODY_TIMEOUT_SECONDS", "MAX_PENDING_CONNECTIONS"):
            monkeypatch.setenv(f"ESCHER_{name}", str(env[f"ESCHER_{name}"]))
        args = serve_args(docs)
        got = (
            args.listen.header_timeout_seconds,
            args.listen.body_timeout_seconds,
            args.listen.max_pending_connections,
        )
        assert got == want


def test_another_resource_domain_reaches_every_key_that_names_it() -> None:
    docs = render({"resourceDomain": "example.com"})
    assert serve_args(docs).resource_domain == "example.com"
    managed = [e["managedResources"] for e in scheduler_config(docs)["extenders"]]
    assert managed == [
        [{"name": "scheduling.example.com/gang", "ignoredByScheduler": True}],
        [{"name": "scheduling.example.com/bind", "ignoredByScheduler": True}],
        [{"name": "scheduling.example.com/score", "ignoredByScheduler": True}],
    ]
    policies = [d for d in docs if d["kind"].endswith("AdmissionPolicy")]
    assert len(policies) == 4  # marker, gang gate, pod touch, pod nominate
    text = json.dumps(policies)
    assert "escher.io" not in text
    for key_ in ("example.com/gang", "example.com/pack", "example.com/prefer",
                 "example.com/requeued-at", "scheduling.example.com/gang",
                 "scheduling.example.com/bind", "scheduling.example.com/score"):  # fmt: skip
        assert key_ in text, key_
    # The marker policy names each marker once (its variables), the gate policy its gate.
    marker = find(docs, "MutatingAdmissionPolicy", f"{RELEASE}-marker")
    markers = {v["name"]: v["expression"] for v in marker["spec"]["variables"]}["markers"]
    for name in (
        "scheduling.example.com/gang",
        "scheduling.example.com/bind",
        "scheduling.example.com/score",
    ):
        assert markers.count(f'"{name}"') == 1, name
    gate = find(docs, "MutatingAdmissionPolicy", f"{RELEASE}-gang-gate")
    (mutation,) = gate["spec"]["mutations"]
    assert mutation["jsonPatch"]["expression"].count('"example.com/gang"') == 2


def test_in_dra_mode_another_resource_domain_is_the_driver_the_policy_holds_it_to() -> None:
    docs = render({"mode": "dra", "resourceDomain": "example.com"})
    args = serve_args(docs)
    assert args.mode == "dra" and args.dra.driver_name(args.resource_domain) == "example.com"
    (policy,) = kinds(docs, "ValidatingAdmissionPolicy")
    text = json.dumps(policy)
    assert "escher.io" not in text
    checks = [" ".join(v["expression"].split()) for v in policy["spec"]["validations"]]
    assert "variables.subject.spec.driver == 'example.com'" in checks[1]
    assert "startsWith('example.com/')" in checks[2]
    messages = [v["message"] for v in policy["spec"]["validations"]]
    assert messages[1].endswith("its driver example.com")
    assert "an example.com/ name" in messages[2]


# ---- TLS and the token -------------------------------------------------------------------


def secret_files(doc: Doc, directory: Path) -> dict[str, Path]:
    directory.mkdir()
    out = {}
    for k, v in doc["data"].items():
        out[k] = directory / k
        out[k].write_bytes(base64.b64decode(v))
    return out


def handshake(serving: dict[str, Path], client: dict[str, Path], hostname: str) -> dict[str, Any]:
    """A TLS handshake as the verbs listener and kube-scheduler do it: the server shows the
    serving pair and requires a client certificate signed by the client Secret's ca.crt, the
    client verifies the server against the serving Secret's ca.crt for `hostname` and shows
    its pair. Returns the client's certificate as the server saw it."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(serving["tls.crt"], serving["tls.key"])
    server_context.verify_mode = ssl.CERT_REQUIRED
    server_context.load_verify_locations(client["ca.crt"])
    client_context = ssl.create_default_context(cafile=str(serving["ca.crt"]))
    client_context.load_cert_chain(client["tls.crt"], client["tls.key"])
    left, right = socket.socketpair()
    seen: dict[str, Any] = {}

    def serve() -> None:
        try:
            with server_context.wrap_socket(left, server_side=True) as tls:
                seen.update(tls.getpeercert() or {})
        except (ssl.SSLError, OSError) as e:
            seen["error"] = e

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client_context.wrap_socket(right, server_hostname=hostname):
            pass
    finally:
        right.close()
        thread.join(10)
    return seen


def test_the_generated_certificates_make_a_mutual_tls_handshake(tmp_path: Path) -> None:
    docs = render()
    serving = secret_files(find(docs, "Secret", f"{RELEASE}-tls"), tmp_path / "serving")
    client = secret_files(find(docs, "Secret", "escher-scheduler-client-tls"), tmp_path / "c")
    # One CA signs both; the verbs listener trusts the client Secret's copy.
    assert serving["ca.crt"].read_bytes() == client["ca.crt"].read_bytes()
    for name in (f"{RELEASE}.{NAMESPACE}.svc", f"{RELEASE}.{NAMESPACE}.svc.cluster.local"):
        seen = handshake(serving, client, name)
        assert "error" not in seen, seen
        subject = dict(x for rdn in seen["subject"] for x in rdn)
        assert subject["commonName"] == "escher-scheduler"
    # The host name is checked: another name fails.
    with pytest.raises(ssl.SSLCertVerificationError, match=r"Hostname mismatch"):
        handshake(serving, client, f"other.{NAMESPACE}.svc")
    # The pods that read them restart when they change: both carry their checksum.
    for workload in (RELEASE, "escher-scheduler"):
        annotations = deployment(docs, workload)["spec"]["template"]["metadata"]["annotations"]
        assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/tls"])
    assert len({
        deployment(docs, w)["spec"]["template"]["metadata"]["annotations"]["checksum/tls"]
        for w in (RELEASE, "escher-scheduler")
    }) == 1  # fmt: skip
    # Marked with what they were made for: an upgrade keeps them only for the same names.
    marks = {
        find(docs, "Secret", n)["metadata"]["annotations"]["escher.io/generated-for"]
        for n in (f"{RELEASE}-tls", "escher-scheduler-client-tls")
    }
    assert len(marks) == 1 and marks != {""}
    # Extra names reach the certificate.
    docs = render({"tls": {"extraDNSNames": ["escher.example.com"]}})
    serving = secret_files(find(docs, "Secret", f"{RELEASE}-tls"), tmp_path / "extra")
    client = secret_files(find(docs, "Secret", "escher-scheduler-client-tls"), tmp_path / "xc")
    assert "error" not in handshake(serving, client, "escher.example.com")


def test_cert_manager_issues_both_certificates_for_the_same_names() -> None:
    docs = render({"tls": {"certManager": {"enabled": True}}})
    assert [d["metadata"]["name"] for d in kinds(docs, "Secret")] == [f"{RELEASE}-token"]
    serving = find(docs, "Certificate", RELEASE)["spec"]
    client = find(docs, "Certificate", "escher-scheduler-client")["spec"]
    ca = find(docs, "Certificate", f"{RELEASE}-ca")["spec"]
    assert serving["secretName"] == f"{RELEASE}-tls"
    assert serving["dnsNames"] == [
        f"{RELEASE}.{NAMESPACE}.svc",
        f"{RELEASE}.{NAMESPACE}.svc.cluster.local",
    ]
    assert "server auth" in serving["usages"] and "client auth" in client["usages"]
    assert client["secretName"] == "escher-scheduler-client-tls"
    assert client["commonName"] == "escher-scheduler"
    # Self-signed Issuer -> CA Certificate -> CA Issuer -> both certificates.
    assert ca["isCA"] is True
    assert find(docs, "Issuer", f"{RELEASE}-selfsigned")["spec"] == {"selfSigned": {}}
    ca_issuer = find(docs, "Issuer", f"{RELEASE}-ca")
    assert ca_issuer["spec"] == {"ca": {"secretName": ca["secretName"]}}
    assert ca["issuerRef"]["name"] == f"{RELEASE}-selfsigned"
    expected_ref = {"name": f"{RELEASE}-ca", "kind": "Issuer", "group": "cert-manager.io"}
    assert serving["issuerRef"] == client["issuerRef"] == expected_ref
    # No checksum: cert-manager renews on its own schedule (docs: restart after a renewal).
    for workload in (RELEASE, "escher-scheduler"):
        template = deployment(docs, workload)["spec"]["template"]["metadata"]
        assert "checksum/tls" not in template.get("annotations", {})
    # An issuer of one's own: no Issuer of the chart's.
    ref = {"name": "company-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    docs = render({"tls": {"certManager": {"enabled": True, "issuerRef": ref}}})
    assert not kinds(docs, "Issuer")
    assert find(docs, "Certificate", RELEASE)["spec"]["issuerRef"] == ref


def test_the_token_is_generated_or_taken_from_an_existing_secret() -> None:
    docs = render()
    token = find(docs, "Secret", f"{RELEASE}-token")
    assert len(base64.b64decode(token["data"]["token"])) >= 32
    (env,) = [e for e in container(docs, RELEASE)["env"] if e["name"] == "ESCHER_TOKEN"]
    assert env["valueFrom"]["secretKeyRef"] == {"name": f"{RELEASE}-token", "key": "token"}
    docs = render({"token": {"existingSecret": "mine"}})
    assert not [d for d in kinds(docs, "Secret") if d["metadata"]["name"].endswith("-token")]
    (env,) = [e for e in container(docs, RELEASE)["env"] if e["name"] == "ESCHER_TOKEN"]
    assert env["valueFrom"]["secretKeyRef"] == {"name": "mine", "key": "token"}


# ---- the documentation -------------------------------------------------------------------


def test_every_value_is_in_the_docs_values_table() -> None:
    docs = (REPO / "docs" / "deployment.md").read_text()
    section = docs.split("\n## Helm\n", 1)[1].split("\n## ", 1)[0]
    table = section.split("\n### Values\n", 1)[1].split("\n### ", 1)[0]

    def leaves(props: Mapping[str, Any], path: str) -> Iterator[str]:
        for k, v in props.items():
            if "properties" in v:
                yield from leaves(v["properties"], f"{path}{k}.")
            else:
                yield f"{path}{k}"

    def documented(leaf: str) -> bool:  # itself, or a whole it belongs to (`resources`)
        parts = leaf.split(".")
        return any(f"`{'.'.join(parts[:n])}`" in table for n in range(1, len(parts) + 1))

    missing = [leaf for leaf in leaves(schema()["properties"], "") if not documented(leaf)]
    assert not missing, f"docs/deployment.md's Helm values table lacks {missing}"
