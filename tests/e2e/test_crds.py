"""The policies' CRDs on the real API server: what the schema accepts, and what it refuses
with the field named, before the extender ever sees it (issue 30, part 4).

The cluster runs the service (pure mode: the cheapest that serves the CRDs, which `cluster
up` creates wherever the service runs, as deploy/ and the chart install them). Objects are
sent with kubectl, as a user sends them; the refusals are the API server's own messages.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from escher_harness import localcluster
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


def test_the_status_subresource_takes_status_and_ignores_spec(
    cluster: localcluster.ClusterInfo,
) -> None:
    assert create(cluster, resource("st", capacity=3, node="node-0")).returncode == 0
    usage = {"node-0": {"capacity": 3, "allocated": 1, "available": 2}}
    status = {"observedGeneration": 1, "nodeCount": 1, "allocated": 1, "nodes": usage}
    body = json.dumps({"spec": {"capacity": 99}, "status": status})
    done = kubectl(
        cluster, "patch", "eres", "st", "--subresource=status", "--type=merge", "-p", body
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(kubectl(cluster, "get", "eres", "st", "-o", "json").stdout)
    assert got["status"] == status and got["spec"]["capacity"] == 3
    table = kubectl(cluster, "get", "eres", "st").stdout.split("\n")[0].split()
    assert table == ["NAME", "CAPACITY", "NODES", "ALLOCATED", "DURABLE", "AGE"]
    assert kubectl(cluster, "get", "esls").returncode == 0


POLICY_EXAMPLES = sorted(
    p.name for p in EXAMPLES.glob("*.yaml") if f"apiVersion: {GROUP}" in p.read_text()
)


@pytest.mark.parametrize("example", POLICY_EXAMPLES)
def test_the_docs_examples_apply(cluster: localcluster.ClusterInfo, example: str) -> None:
    assert len(POLICY_EXAMPLES) >= 2
    done = kubectl(cluster, "apply", "--validate=strict", "-f", str(EXAMPLES / example))
    assert done.returncode == 0, done.stderr
    done = kubectl(cluster, "delete", "-f", str(EXAMPLES / example))
    assert done.returncode == 0, done.stderr
