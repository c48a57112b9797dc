"""Records what kube-scheduler v1.37 really sends to an extender, and keeps it as fixtures.

A stand-in extender (stdlib HTTP server on 127.0.0.1: filter passes every node, prioritize
scores them, no bind verb) is named by a user-supplied KubeSchedulerConfiguration; a pod is
scheduled through it with nodeCacheCapable true and false. The recordings settle the wire
format: tests/fixtures/kube-scheduler-v1.37/{filter-nodenames,filter-nodelist,
prioritize-nodenames}.json. A fresh recording must have the fixture's key structure (values
such as uids and timestamps vary). After a deliberate change (a new Kubernetes version, other
fake nodes), rewrite the fixtures with ESCHER_UPDATE_WIRE_FIXTURES=1.

What the replies must look like (read from pkg/scheduler/extender.go and shown by this test,
whose pod is bound only if kube-scheduler accepted them):
- filter, nodeCacheCapable true: {"NodeNames": [...], "FailedNodes": {}, "Error": ""}; every
  name must be one of those sent. A reply with only "Nodes" is accepted too.
- filter, nodeCacheCapable false: {"Nodes": {"items": [...]}, ...}; "NodeNames" alone counts as
  "no node passed". kube-scheduler rebuilds its NodeInfos from the returned Node objects.
- prioritize: a bare JSON array [{"Host": name, "Score": 0..10}], not an object.
- a non-empty "Error" fails the pod's scheduling attempt (the extender is not ignorable).
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from escher_harness.kubeclient import api_client
from escher_harness.pytest_plugin import ClusterFactory

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).parents[1] / "fixtures" / "kube-scheduler-v1.37"
UPDATE = os.environ.get("ESCHER_UPDATE_WIRE_FIXTURES") == "1"


class Recorder(ThreadingHTTPServer):
    """The stand-in extender: records each request body by verb."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: dict[str, list[dict[str, Any]]] = {"filter": [], "prioritize": []}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Recorder

    def do_POST(self) -> None:
        verb = self.path.strip("/")
        args = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests[verb].append(args)
        if args["NodeNames"] is not None:
            names = args["NodeNames"]
        else:
            names = [n["metadata"]["name"] for n in args["Nodes"]["items"]]
        reply: Any
        if verb == "filter":
            passed = (
                {"NodeNames": names} if args["NodeNames"] is not None else {"Nodes": args["Nodes"]}
            )
            reply = {**passed, "FailedNodes": {}, "Error": ""}
        else:
            reply = [{"Host": name, "Score": i % 11} for i, name in enumerate(sorted(names))]
        body = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    server = Recorder()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def key_structure(value: Any, path: str = "") -> set[str]:
    """Every key path in a JSON value (list elements merged as "[]"), values ignored.
    managedFields is the apiserver's bookkeeping and not descended into."""
    paths: set[str] = set()
    if isinstance(value, dict):
        for key, child in value.items():
            sub = f"{path}.{key}" if path else key
            paths.add(sub)
            if key != "managedFields":
                paths |= key_structure(child, sub)
    elif isinstance(value, list):
        for child in value:
            paths |= key_structure(child, f"{path}[]")
    return paths


def compare_with_fixture(name: str, recorded: dict[str, Any]) -> None:
    path = FIXTURES / name
    if UPDATE:
        path.write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n")
    assert path.exists(), f"{path} missing; record it with ESCHER_UPDATE_WIRE_FIXTURES=1"
    fixture = json.loads(path.read_text())
    assert key_structure(recorded) == key_structure(fixture)


@pytest.mark.parametrize("node_cache_capable", [True, False], ids=["nodenames", "nodelist"])
def test_kube_scheduler_calls_the_extender(
    local_cluster: ClusterFactory, recorder: Recorder, tmp_path: Path, node_cache_capable: bool
) -> None:
    config = tmp_path / "scheduler-config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "extenders": [
                    {
                        "urlPrefix": recorder.url,
                        "filterVerb": "filter",
                        "prioritizeVerb": "prioritize",
                        "weight": 1,
                        "nodeCacheCapable": node_cache_capable,
                        "httpTimeout": "5s",
                    }
                ],
            }
        )
    )
    info = local_cluster(nodes=3, scheduler_config=config)
    pod_name = f"wire-{uuid.uuid4().hex[:8]}"
    with api_client(info.kubeconfig) as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod(
            "default",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod_name, "labels": {"app": "wire"}},
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                        }
                    ]
                },
            },
        )
        deadline = time.monotonic() + 30
        while not (node := core.read_namespaced_pod(pod_name, "default").spec.node_name):
            assert time.monotonic() < deadline, "pod not bound through the extender"
            time.sleep(0.1)
    assert node in info.nodes

    filters, prioritizes = recorder.requests["filter"], recorder.requests["prioritize"]
    assert filters and prioritizes, "kube-scheduler did not call both verbs"
    for args in [*filters, *prioritizes]:
        # The v1 extender types have no JSON tags: Go field names, capitalised; both node
        # fields are always present, the unused one null.
        assert set(args) == {"Pod", "Nodes", "NodeNames"}
        assert args["Pod"]["metadata"]["name"] == pod_name  # the Pod itself is a v1.Pod ...
        assert "kind" not in args["Pod"] and "apiVersion" not in args["Pod"]  # ... without TypeMeta
        assert args["Pod"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "100m"
        if node_cache_capable:
            assert args["Nodes"] is None
            assert sorted(args["NodeNames"]) == sorted(info.nodes)
        else:
            assert args["NodeNames"] is None
            assert set(args["Nodes"]) == {"metadata", "items"}  # a NodeList without TypeMeta
            items = args["Nodes"]["items"]
            assert sorted(n["metadata"]["name"] for n in items) == sorted(info.nodes)
            assert items[0]["status"]["allocatable"]["pods"] == "110"

    kind = "nodenames" if node_cache_capable else "nodelist"
    compare_with_fixture(f"filter-{kind}.json", filters[0])
    if node_cache_capable:
        compare_with_fixture("prioritize-nodenames.json", prioritizes[0])
