"""The policies' CRDs on the real API server: what the schema accepts, and what it refuses
with the field named, before the extender ever sees it (issue 30, part 4).

The cluster runs the service (pure mode: the cheapest that serves the CRDs, which `cluster
up` creates wherever the service runs, as deploy/ and the chart install them). Objects are
sent with kubectl, as a user sends them; the refusals are the API server's own messages.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from escher_harness import localcluster
from escher_harness.bench.latency import Server
from escher_harness.localcluster.binaries import find_kubectl

pytestmark = [pytest.mark.e2e, pytest.mark.cluster(nodes=1, mode="pure")]

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
GROUP = "escher.io/v1alpha1"


def kubectl(
    cluster: localcluster.ClusterInfo, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(find_kubectl()), "--kubeconfig", str(cluster.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def resource(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": GROUP,
        "kind": "EphemeralResource",
        "metadata": {"name": name},
        "spec": spec,
    }


def esl(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": GROUP, "kind": "ESL", "metadata": {"name": name}, "spec": spec}


def create(
    cluster: localcluster.ClusterInfo, obj: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    return kubectl(cluster, "create", "-f", "-", stdin=json.dumps(obj))


COMPOSE = {
    "name": "both",
    "parts": [
        {"kind": "colocation", "params": {"groups": {"a": 2}}},
        {"kind": "loadbalance", "params": {}},
    ],
}
VALID = [
    resource("r-every-node", capacity=1),
    resource("r-node", capacity=9223372036854775807, node="node-0"),
    resource("r-selector", capacity=0, nodeSelector={"pool": "a"}, numNodes=3),
    resource("r-spec", capacity=2, nodeSpec={"cpu": "2", "memory": 1024}),
    esl("coloc", {"kind": "colocation", "params": {"name": "coloc", "groups": {"a": 2}}}),
    esl("noname", {"kind": "gang", "params": {"size": 4}}),
    esl("both", {"kind": "compose", "params": COMPOSE}),
]


@pytest.mark.parametrize("obj", VALID, ids=lambda o: o["metadata"]["name"])
def test_valid_objects_are_accepted(cluster: localcluster.ClusterInfo, obj: dict[str, Any]) -> None:
    done = create(cluster, obj)
    assert done.returncode == 0, done.stderr
    kind = "eres" if obj["kind"] == "EphemeralResource" else "esls"
    got = json.loads(kubectl(cluster, "get", kind, obj["metadata"]["name"], "-o", "json").stdout)
    assert got["spec"] == obj["spec"]


ABOVE_INT64 = json.dumps(resource("huge", capacity=1)).replace(
    '"capacity": 1', '"capacity": 9223372036854775808'
)
TWO_TARGETS = resource("two", capacity=1, node="node-0", nodeSelector={"a": "b"})
REFUSED = {
    "negative": (resource("neg", capacity=-1), "spec.capacity"),
    "above-int64": (ABOVE_INT64, "spec.capacity"),  # raw JSON, as a hostile client sends it
    "two-targets": (TWO_TARGETS, "give at most one of node, nodeSelector, nodeSpec"),
    "upper-case-name": (resource("UPPER", capacity=1), "metadata.name"),
    "long-name": (resource("r" * 64, capacity=1), "metadata.name must be at most 63"),
    "unknown-field": (resource("extra", capacity=1, nodes=["a"]), 'unknown field "spec.nodes"'),
    "num-nodes-0": (resource("zero", capacity=1, numNodes=0), "spec.numNodes"),
    "no-capacity": (resource("nocap", node="node-0"), "spec.capacity: Required value"),
    "unknown-kind": (esl("k", {"kind": "nosuch", "params": {}}), "spec.kind: Unsupported value"),
    "no-params": (esl("p", {"kind": "gang"}), "spec.params: Required value"),
    "esl-long-name": (esl("e" * 31, {"kind": "gang", "params": {}}), "metadata.name must be 1-30"),
    "esl-dotted-name": (esl("a.b", {"kind": "gang", "params": {}}), "metadata.name must be 1-30"),
    "params-name": (
        esl("mine", {"kind": "gang", "params": {"name": "other"}}),
        "spec.params.name, if given, must equal metadata.name",
    ),
}


@pytest.mark.parametrize(("obj", "field"), REFUSED.values(), ids=REFUSED.keys())
def test_the_api_server_refuses_a_bad_object_naming_the_field(
    cluster: localcluster.ClusterInfo, obj: dict[str, Any] | str, field: str
) -> None:
    raw = obj if isinstance(obj, str) else json.dumps(obj)
    done = kubectl(cluster, "create", "--validate=strict", "-f", "-", stdin=raw)
    assert done.returncode != 0
    assert field in done.stderr, done.stderr
    name = json.loads(raw)["metadata"]["name"]
    kind = "eres" if "EphemeralResource" in raw else "esls"
    assert "NotFound" in kubectl(cluster, "get", kind, name).stderr  # nothing was created


def test_an_esls_spec_cannot_change(cluster: localcluster.ClusterInfo) -> None:
    obj = esl("fixed", {"kind": "gang", "params": {"size": 2}})
    assert create(cluster, obj).returncode == 0
    patch = json.dumps({"spec": {"params": {"size": 3}}})
    done = kubectl(cluster, "patch", "esl", "fixed", "--type=merge", "-p", patch)
    assert done.returncode != 0
    assert "an ESL's spec cannot change: delete it and create it again" in done.stderr


CONDITION = {
    "type": "Ready",
    "status": "True",
    "observedGeneration": 1,
    "lastTransitionTime": "2026-11-25T00:00:00Z",
    "reason": "Applied",
    "message": "created its resources",
}
# (object, the status the extender will write, a spec change sent with it through /status).
STATUS = {
    "eres": (
        resource("st", capacity=3, node="node-0"),
        {
            "observedGeneration": 1,
            "nodeCount": 1,
            "capacity": 3,
            "allocated": 1,
            "available": 2,
            "nodesListed": True,
            "nodes": {"node-0": {"capacity": 3, "allocated": 1, "available": 2}},
            "conditions": [{**CONDITION, "type": "Durable"}],
        },
        {"capacity": 99},
    ),
    "esls": (
        esl("st", {"kind": "gang", "params": {"size": 2}}),
        {
            "observedGeneration": 1,
            "id": "gang-st",
            "resources": ["escher.io/gang-st"],
            "requests": {"member": {"limits": {"escher.io/gang-st": "1"}, "labels": {}}},
            "dynamic": False,
            "steps": 0,
            "conditions": [CONDITION],
        },
        {"params": {"size": 3}},
    ),
}


@pytest.mark.parametrize(("kind", "case"), STATUS.items(), ids=STATUS.keys())
def test_the_status_subresource_takes_status_and_ignores_spec(
    cluster: localcluster.ClusterInfo, kind: str, case: tuple[dict[str, Any], ...]
) -> None:
    obj, status, spec_change = case
    assert create(cluster, obj).returncode == 0
    # Server-side dry runs: the API server's answer, not raced by the extender, which
    # reconciles the object and writes its status meanwhile.
    body = json.dumps({"spec": spec_change, "status": status})
    done = kubectl(
        cluster,
        "patch",
        kind,
        "st",
        "--subresource=status",
        "--type=merge",
        "-p",
        body,
        "--dry-run=server",
        "-o",
        "json",
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["status"] == status and got["spec"] == obj["spec"]
    # ... and the main resource ignores status (the extender's alone to write).
    before = json.loads(kubectl(cluster, "get", kind, "st", "-o", "json").stdout)
    body = json.dumps({"metadata": {"labels": {"x": "y"}}, "status": {"observedGeneration": 7}})
    done = kubectl(
        cluster, "patch", kind, "st", "--type=merge", "-p", body, "--dry-run=server", "-o", "json"
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["metadata"]["labels"] == {"x": "y"}
    assert got.get("status", {}).get("observedGeneration") == before.get("status", {}).get(
        "observedGeneration"
    )


# The printer columns, as `kubectl get` shows them once the extender wrote the status.
COLUMNS = {
    "eres": (
        ["NAME", "CAPACITY", "NODES", "ALLOCATED", "DURABLE", "AGE"],
        ["cols", "3", "1", "0", "True"],
    ),
    "esls": (["NAME", "KIND", "READY", "STEPS", "AGE"], ["cols", "gang", "True"]),
}


@pytest.mark.parametrize(("kind", "want"), COLUMNS.items(), ids=COLUMNS.keys())
def test_kubectl_get_shows_the_printer_columns(
    cluster: localcluster.ClusterInfo, kind: str, want: tuple[list[str], list[str]]
) -> None:
    header, row = want
    obj, _, _ = STATUS[kind]
    obj = {**obj, "metadata": {"name": "cols"}}
    if kind == "esls":  # one the extender can apply: Ready
        obj = esl("cols", {"kind": "gang", "params": {"members": 2}})
    assert create(cluster, obj).returncode == 0
    deadline = time.monotonic() + 30
    while True:
        lines = kubectl(cluster, "get", kind, "cols").stdout.splitlines()
        if len(lines) > 1 and lines[1].split()[: len(row)] == row:
            break
        assert time.monotonic() < deadline, lines
        time.sleep(0.2)
    assert lines[0].split() == header
    # The category `escher` lists it too.
    singular = {"eres": "ephemeralresource", "esls": "esl"}[kind]
    listed = kubectl(cluster, "get", "escher", "-o", "name").stdout.split()
    assert f"{singular}.escher.io/cols" in listed


EXAMPLES_FILES = sorted(p.name for p in EXAMPLES.glob("*.yaml"))


@pytest.mark.parametrize("example", EXAMPLES_FILES)
def test_the_docs_examples_apply(cluster: localcluster.ClusterInfo, example: str) -> None:
    path = str(EXAMPLES / example)
    done = kubectl(cluster, "apply", "--validate=strict", "-f", path)
    assert done.returncode == 0, done.stderr
    done = kubectl(cluster, "delete", "--wait=false", "-f", path)
    assert done.returncode == 0, done.stderr


def test_the_docs_show_both_kinds() -> None:
    kinds = {
        yaml.safe_load((EXAMPLES / name).read_text())["kind"]
        for name in EXAMPLES_FILES
        if GROUP in (EXAMPLES / name).read_text()
    }
    assert kinds == {"EphemeralResource", "ESL"}


# The embedded cluster's CRDs follow its resource domain, and only a service's cluster has
# them (mode none runs no extender).
SERVED = {
    "pure-other-domain": (
        {"mode": "pure", "resource_domain": "sched.example.com"},
        ["ephemeralresources.sched.example.com", "esls.sched.example.com"],
    ),
    "none": ({"mode": "none"}, []),
}


@pytest.mark.parametrize(
    ("fresh_cluster", "crds"), SERVED.values(), ids=SERVED.keys(), indirect=["fresh_cluster"]
)
def test_the_embedded_cluster_serves_the_crds_in_its_domain_where_the_service_runs(
    fresh_cluster: localcluster.ClusterInfo, crds: list[str]
) -> None:
    listed = kubectl(fresh_cluster, "get", "crd", "-o", "name").stdout.split()
    assert listed == [f"customresourcedefinition.apiextensions.k8s.io/{c}" for c in crds]
    if crds:
        obj = {**resource("other", capacity=1), "apiVersion": "sched.example.com/v1alpha1"}
        done = create(fresh_cluster, obj)
        assert done.returncode == 0, done.stderr


def test_kubectl_apply_then_delete_of_an_esl_makes_then_removes_its_resources(
    cluster: localcluster.ClusterInfo,
) -> None:
    """The docs' colocation ESL, applied and deleted with kubectl alone: the leader makes its
    resources (owned objects, on the node), says so in the status, and its finalizer removes
    them before the object goes."""
    obj = yaml.safe_load((EXAMPLES / "esl-colocation.yaml").read_text())
    obj["metadata"]["name"] = obj["spec"]["params"]["name"] = "tour"
    done = kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(obj))
    assert done.returncode == 0, done.stderr
    want = {"escher.io/coloc-tour-cache": "2", "escher.io/coloc-tour-frontend": "3"}

    def on_node() -> dict[str, str]:
        node = json.loads(kubectl(cluster, "get", "node", "node-0", "-o", "json").stdout)
        shown = node["status"]["allocatable"]
        return {k: v for k, v in shown.items() if k.startswith("escher.io/coloc-tour")}

    deadline = time.monotonic() + 30
    while on_node() != want:
        assert time.monotonic() < deadline, on_node()
        time.sleep(0.2)
    got = json.loads(kubectl(cluster, "get", "esl", "tour", "-o", "json").stdout)
    ready = {c["type"]: c["status"] for c in got["status"]["conditions"]}
    assert ready == {"Ready": "True", "NoRoom": "False", "Unsatisfiable": "False"}
    assert got["status"]["resources"] == sorted(want)
    # What a new leader resumes it from is kept (the schema preserves it, not pruned).
    assert got["status"]["state"]["created"] == [r.removeprefix("escher.io/") for r in sorted(want)]
    assert got["status"]["requests"]["cache"]["limits"] == {"escher.io/coloc-tour-cache": "1"}
    owned = json.loads(
        kubectl(cluster, "get", "eres", "-l", "escher.io/esl=tour", "-o", "json").stdout
    )
    assert sorted(o["metadata"]["name"] for o in owned["items"]) == [
        "coloc-tour-cache",
        "coloc-tour-frontend",
    ]
    assert all(o["metadata"]["ownerReferences"][0]["kind"] == "ESL" for o in owned["items"])
    # kubectl delete waits for the finalizer: the resources are gone from the node first.
    done = kubectl(cluster, "delete", "esl", "tour", "--timeout=30s")
    assert done.returncode == 0, done.stderr
    assert on_node() == {}
    left = kubectl(cluster, "get", "eres", "-l", "escher.io/esl=tour", "-o", "name").stdout
    assert left.strip() == ""


WRITER_ROLE = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: escher-policy-writer
rules:
  - apiGroups: ["escher.io"]
    resources: ["ephemeralresources", "esls"]
    verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: escher-policy-writer-alice
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: escher-policy-writer}
subjects: [{kind: ServiceAccount, name: alice, namespace: default}]
"""


def test_one_cluster_role_governs_kubectl_and_the_policy_api(
    cluster: localcluster.ClusterInfo, tmp_path: Path
) -> None:
    """docs/policy-api.md's ClusterRole on the CRDs: who has it may write the objects with
    kubectl and make the same changes over HTTP; who has it not is refused on both paths.
    The HTTP side is an extender with --kubernetes-auth (TokenReview, SubjectAccessReview),
    in memory so that it leaves the cluster's own extender alone: each call it lets through
    fails on purpose after authorization (an unknown node, invalid parameters)."""
    for sa in ("alice", "bob"):
        done = kubectl(cluster, "create", "serviceaccount", sa)
        assert done.returncode == 0 or "AlreadyExists" in done.stderr, done.stderr
    done = kubectl(cluster, "apply", "-f", "-", stdin=WRITER_ROLE)
    assert done.returncode == 0, done.stderr
    tokens = {sa: kubectl(cluster, "create", "token", sa).stdout.strip() for sa in ("alice", "bob")}
    flags = ("--mode", "pure", "--no-policy-objects", "--kubernetes-auth")
    kube = ("--kubeconfig", str(cluster.kubeconfig))
    extender = Server(tmp_path / "extender.log", (*flags, *kube))
    url = extender.url
    try:
        calls = {
            "ephemeralresources": ("PUT", "/v1/resources/sar", {"capacity": 1, "node": "nowhere"}),
            "esls": ("POST", "/v1/esl/colocation", {"name": "sar"}),
        }
        passed = {"ephemeralresources": 404, "esls": 422}  # refused after authorization
        for kind, (method, path, body) in calls.items():
            for sa, token in tokens.items():
                headers = {"Authorization": f"Bearer {token}"}
                reply = httpx.request(method, url + path, json=body, headers=headers, timeout=10)
                if sa == "alice":
                    assert reply.status_code == passed[kind], reply.text
                else:
                    assert reply.status_code == 403, reply.text
                    assert f"{kind}.escher.io" in reply.json()["error"]
        # ... and the same grant, on the objects themselves.
        obj = json.dumps(resource("sar", capacity=1))
        for sa, token in tokens.items():
            done = kubectl(
                cluster, "--token", token, "create", "--dry-run=server", "-f", "-", stdin=obj
            )
            assert (done.returncode == 0) == (sa == "alice"), done.stderr
    finally:
        extender.stop()


def test_an_object_the_extender_cannot_apply_says_why_and_changes_nothing(
    cluster: localcluster.ClusterInfo,
) -> None:
    """Valid to the API server, not to the ledger: an unknown node. The status names it, and
    no node carries the resource."""
    assert create(cluster, resource("nowhere-r", capacity=2, node="no-such-node")).returncode == 0
    deadline = time.monotonic() + 30
    while True:
        got = json.loads(kubectl(cluster, "get", "eres", "nowhere-r", "-o", "json").stdout)
        conditions = {c["type"]: c for c in got.get("status", {}).get("conditions", [])}
        if "Applied" in conditions:
            break
        assert time.monotonic() < deadline, got
        time.sleep(0.2)
    applied = conditions["Applied"]
    assert (applied["status"], applied["reason"]) == ("False", "UnknownNode")
    assert "no-such-node" in applied["message"]
    assert conditions["Durable"]["status"] == "False"
    node = json.loads(kubectl(cluster, "get", "node", "node-0", "-o", "json").stdout)
    assert "escher.io/nowhere-r" not in node["status"]["allocatable"]
    assert kubectl(cluster, "delete", "eres", "nowhere-r", "--timeout=30s").returncode == 0


def test_a_resource_only_on_the_nodes_is_adopted_as_an_object_at_start(
    cluster: localcluster.ClusterInfo,
) -> None:
    """As after an upgrade from before policies were objects: a resource written on a node
    with no object. The extender, started again, gives it one and leaves the node as it is."""
    localcluster.stop_component(cluster.dir, "extender")
    try:
        legacy = {"escher.io/legacy": "4"}
        patch = json.dumps({"status": {"capacity": legacy, "allocatable": legacy}})
        done = kubectl(
            cluster, "patch", "node", "node-0", "--subresource=status", "--type=merge", "-p", patch
        )
        assert done.returncode == 0, done.stderr
    finally:
        localcluster.start_component(cluster.dir, "extender")
    deadline = time.monotonic() + 30
    while (got := kubectl(cluster, "get", "eres", "legacy", "-o", "json")).returncode != 0:
        assert time.monotonic() < deadline, got.stderr
        time.sleep(0.2)
    obj = json.loads(got.stdout)
    assert obj["spec"] == {"capacity": 4, "node": "node-0"}
    assert obj["metadata"]["annotations"]["escher.io/adopted"] == "from the nodes"
    node = json.loads(kubectl(cluster, "get", "node", "node-0", "-o", "json").stdout)
    assert node["status"]["allocatable"]["escher.io/legacy"] == "4"
    assert kubectl(cluster, "delete", "eres", "legacy", "--timeout=30s").returncode == 0
    node = json.loads(kubectl(cluster, "get", "node", "node-0", "-o", "json").stdout)
    assert "escher.io/legacy" not in node["status"]["allocatable"]
