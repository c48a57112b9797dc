"""The Helm chart deploy/helm/escher-extender on a real kube-apiserver (the embedded control
plane: no extender, no kwok; nothing here needs a pod to run).

- Every documented combination (the chart's ci/*-values.yaml), rendered by `helm template`,
  is accepted by the API server in a server-side dry run of `kubectl apply`, with no
  warning: the namespace enforces and warns the restricted Pod Security level as deploy/'s
  does, the admission policies' CEL compiles, and no API in use is deprecated. The Prometheus
  Operator's and cert-manager's kinds are served by minimal CRDs created here (their specs
  unchecked: those operators validate their own objects); the dry run then checks what the
  API server can, the envelope (kind, group, version, names, namespace).
- `helm install` then `helm upgrade` keep the generated certificates and the token (the
  templates' lookup), so an upgrade restarts no pod for them, and a change of the names the
  certificate must carry makes new ones (and restarts the pods); `helm uninstall` removes
  every object, the cluster-scoped ones too.

tests/process/test_process_helm.py checks what the chart renders, without a cluster.
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from escher_harness import localcluster
from escher_harness.localcluster.binaries import find_kubectl, find_tool
from escher_harness.localcluster.errors import MissingBinaryError

pytestmark = [pytest.mark.e2e, pytest.mark.cluster(nodes=1, kwok=False)]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "escher-extender"
CI = sorted(CHART.glob("ci/*-values.yaml"))
NAMESPACE = "escher-system"
Doc = dict[str, Any]

# Served only so that the dry run can take the chart's objects of these kinds.
FOREIGN_KINDS = [
    ("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"),
    ("monitoring.coreos.com", "PrometheusRule", "prometheusrules"),
    ("cert-manager.io", "Certificate", "certificates"),
    ("cert-manager.io", "Issuer", "issuers"),
]


def minimal_crd(group: str, kind: str, plural: str) -> Doc:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def tool(name: str) -> Path:
    try:
        return find_kubectl() if name == "kubectl" else find_tool(name)
    except MissingBinaryError as e:
        pytest.fail(str(e), pytrace=False)


def run(name: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tool(name)), *args], input=stdin, capture_output=True, text=True, timeout=180
    )


class Cluster:
    def __init__(self, info: localcluster.ClusterInfo) -> None:
        self.kubeconfig = str(info.kubeconfig)

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return run("kubectl", "--kubeconfig", self.kubeconfig, *args, stdin=stdin)

    def helm(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run("helm", "--kubeconfig", self.kubeconfig, *args)

    def ok(self, r: subprocess.CompletedProcess[str]) -> str:
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    def namespace(self, name: str) -> None:
        """A namespace with deploy/'s Pod Security labels (restricted, enforced and warned)."""
        (doc,) = yaml.safe_load_all((REPO / "deploy" / "base" / "namespace.yaml").read_text())
        doc["metadata"]["name"] = name
        self.ok(self.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(doc)))

    def get(self, kind: str, name: str, namespace: str) -> Doc:
        out = self.ok(self.kubectl("get", kind, name, "-n", namespace, "-o", "yaml"))
        return dict(yaml.safe_load(out))


@pytest.fixture(scope="module")
def api(cluster: localcluster.ClusterInfo) -> Cluster:
    c = Cluster(cluster)
    c.namespace(NAMESPACE)
    crds = [minimal_crd(*k) for k in FOREIGN_KINDS]
    c.ok(c.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(crds)))
    names = [f"crd/{d['metadata']['name']}" for d in crds]
    c.ok(c.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names))
    return c


@pytest.mark.parametrize("values", CI, ids=lambda p: p.name)
def test_each_combination_is_accepted_by_the_api_server(api: Cluster, values: Path) -> None:
    rendered = api.ok(
        run("helm", "template", "escher-extender", str(CHART), "-n", NAMESPACE, "-f", str(values))
    )
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    r = api.kubectl("apply", "--server-side", "--dry-run=server", "-f", "-", stdin=rendered)
    assert r.returncode == 0, r.stderr
    # No warning: Pod Security "restricted" holds, nothing deprecated.
    assert r.stderr == ""
    applied = [line for line in r.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(applied) == len(docs), r.stdout


def secret_data(api: Cluster, name: str, namespace: str) -> dict[str, str]:
    return dict(api.get("secret", name, namespace)["data"])


def pod_annotations(api: Cluster, name: str, namespace: str) -> dict[str, str]:
    deployment = api.get("deployment", name, namespace)
    return dict(deployment["spec"]["template"]["metadata"].get("annotations", {}))


def test_an_upgrade_keeps_the_generated_certificates_and_token(api: Cluster) -> None:
    # A release of its own, with names of its own: the dry runs above stay unaffected.
    namespace, release, scheduler = "escher-upgrade", "upgrade", "upgrade-scheduler"
    name = f"{release}-escher-extender"
    api.namespace(namespace)
    chart = [release, str(CHART), "-n", namespace, "--set", f"scheduler.name={scheduler}"]
    secrets = (f"{name}-tls", f"{scheduler}-client-tls", f"{name}-token")
    try:
        api.ok(api.helm("install", *chart))
        before = {s: secret_data(api, s, namespace) for s in secrets}
        checksums = {
            w: pod_annotations(api, w, namespace)["checksum/tls"] for w in (name, scheduler)
        }
        assert len(set(checksums.values())) == 1

        api.ok(api.helm("upgrade", *chart, "--set", "replicas=3"))
        assert api.get("deployment", name, namespace)["spec"]["replicas"] == 3  # it did upgrade
        assert {s: secret_data(api, s, namespace) for s in secrets} == before
        assert {w: pod_annotations(api, w, namespace)["checksum/tls"] for w in checksums} == (
            checksums
        )

        # A name the certificate must carry: new certificates, from a new CA for both, and
        # both pods restart for them; the token stays.
        api.ok(api.helm("upgrade", *chart, "--set", "tls.extraDNSNames={escher.example.com}"))
        after = {s: secret_data(api, s, namespace) for s in secrets}
        assert after[f"{name}-token"] == before[f"{name}-token"]
        for s in secrets[:2]:
            assert after[s]["tls.crt"] != before[s]["tls.crt"]
            assert after[s]["ca.crt"] != before[s]["ca.crt"]
        assert after[secrets[0]]["ca.crt"] == after[secrets[1]]["ca.crt"]
        moved = {w: pod_annotations(api, w, namespace)["checksum/tls"] for w in checksums}
        assert len(set(moved.values())) == 1 and moved != checksums
        assert len(base64.b64decode(after[f"{name}-token"]["token"])) >= 32
    finally:
        uninstalled = api.helm("uninstall", release, "-n", namespace)
    assert uninstalled.returncode == 0, uninstalled.stderr
    # Nothing of the release is left, in its namespace or cluster-wide.
    left = api.kubectl(
        "get", "clusterroles,clusterrolebindings,validatingadmissionpolicies,"
        "mutatingadmissionpolicies,deployments,secrets,configmaps,roles,rolebindings",
        "-A", "-l", f"app.kubernetes.io/instance={release}", "-o", "name",
    )  # fmt: skip
    assert left.returncode == 0 and left.stdout == "", left.stdout + left.stderr


def test_an_install_of_deploy_moves_to_the_chart_as_the_docs_say(api: Cluster) -> None:
    """docs/deployment.md, "Moving from deploy/ to the chart": deploy/'s objects (applied
    with kustomize, Secrets made by the operator) are taken over by `helm install
    --take-ownership --force-conflicts`, once the two Deployments, whose selectors the chart
    extends (and a Deployment's selector cannot change), are deleted; the operator's Secrets
    are kept."""
    rendered = api.ok(run("kubectl", "kustomize", str(REPO / "deploy" / "overlays" / "extender")))
    api.ok(api.kubectl("apply", "--server-side", "-f", "-", stdin=rendered))
    mine = {"escher-extender-tls": ["tls.crt", "tls.key", "ca.crt"],
            "escher-scheduler-client-tls": ["tls.crt", "tls.key", "ca.crt"],
            "escher-extender-token": ["token"]}  # fmt: skip
    for secret, keys in mine.items():
        literals = [f"--from-literal={k}=operator's {k}" for k in keys]
        api.ok(api.kubectl("create", "secret", "generic", secret, "-n", NAMESPACE, *literals))
    before = {s: secret_data(api, s, NAMESPACE) for s in mine}
    (configmap,) = [
        d["metadata"]["name"] for d in yaml.safe_load_all(rendered) if d["kind"] == "ConfigMap"
    ]
    try:
        api.ok(api.kubectl("-n", NAMESPACE, "delete", "deployment", "escher-extender",
                           "escher-scheduler"))  # fmt: skip
        # --force-conflicts: kubectl's apply owns fields whose values the chart's differ from
        # (selectors it extends, CEL kustomize re-folded, defaulted atomic matchConstraints).
        api.ok(
            api.helm(
                "install", "escher-extender", str(CHART), "-n", NAMESPACE,
                "--take-ownership", "--force-conflicts",
                "--set", "tls.generate=false",
                "--set", "token.existingSecret=escher-extender-token",
            )
        )  # fmt: skip
        # Every object of deploy/ is the release's now, but the namespace and the generated
        # ConfigMap (the chart's is named without kustomize's hash), left to delete.
        for doc in yaml.safe_load_all(rendered):
            kind, name = doc["kind"], doc["metadata"]["name"]
            ns = doc["metadata"].get("namespace", NAMESPACE)
            annotations = api.get(kind, name, ns)["metadata"].get("annotations", {})
            owned = annotations.get("meta.helm.sh/release-name") == "escher-extender"
            assert owned == (kind not in ("Namespace", "ConfigMap")), (kind, name)
        assert api.get("configmap", "escher-scheduler-config", NAMESPACE)
        assert {s: secret_data(api, s, NAMESPACE) for s in mine} == before
    finally:
        api.helm("uninstall", "escher-extender", "-n", NAMESPACE)
        api.kubectl("-n", NAMESPACE, "delete", "configmap", configmap, "--ignore-not-found")
        api.kubectl("-n", NAMESPACE, "delete", "secret", *mine, "--ignore-not-found")
