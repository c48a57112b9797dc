"""The three Backends behave as one: the same set_resource semantics and the same typed
refusals (BackendError with the policy API's status and field), whether through the policy
API (ExtenderBackend, against the real app in standalone mode), the ledger in-process
(LedgerBackend) or Node objects (NodeBackend, over a fake Kubernetes API)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from extender.adapters.nodestatus import NodeStatus
from extender.app import create_app
from extender.esl.backends import ExtenderBackend, LedgerBackend, NodeBackend
from extender.esl.base import Backend, BackendError
from extender.esl.client import PolicyClient
from extender.ledger import Ledger
from extender.service import Service
from extender.settings import Settings

D = "escher.io"
NODES = {"n1": {"pool": "a"}, "n2": {"pool": "a"}, "n3": {"pool": "b"}}


class Raw:
    """A urllib3 response as the kubernetes client returns with _preload_content=False."""

    def __init__(self, obj: Any) -> None:
        self.data = json.dumps(obj).encode()

    def read(self) -> bytes:
        return self.data

    def release_conn(self) -> None:
        pass


class FakeCore:
    """The CoreV1Api calls NodeStatus makes: nodes, bound pods (paged), status patches."""

    def __init__(self, page: int = 2) -> None:
        self.nodes = {
            n: {
                "metadata": {"name": n, "labels": labels},
                "status": {
                    "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110", "x.io/gpu": "1"}
                },
            }
            for n, labels in NODES.items()
        }
        self.pods: list[dict[str, Any]] = []
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.page = page

    def _paged(self, items: list[Any], kwargs: dict[str, Any]) -> Raw:
        start = int(kwargs.get("_continue") or 0)
        end = start + self.page
        more = str(end) if end < len(items) else ""
        return Raw({"items": items[start:end], "metadata": {"continue": more}})

    def list_node(self, **kwargs: Any) -> Raw:
        return self._paged(list(self.nodes.values()), kwargs)

    def list_pod_for_all_namespaces(self, **kwargs: Any) -> Raw:
        assert kwargs["field_selector"].startswith("spec.nodeName!=")
        return self._paged(self.pods, kwargs)

    def patch_node_status(self, name: str, body: dict[str, Any], **kwargs: Any) -> Raw:
        assert kwargs["_content_type"] == "application/merge-patch+json"
        self.patches.append((name, body))
        status = self.nodes[name]["status"]
        for field in ("capacity", "allocatable"):
            current = status.setdefault(field, {})
            for k, v in body["status"][field].items():
                if v is None:
                    current.pop(k, None)
                else:
                    current[k] = v
        return Raw(self.nodes[name])

    def bind(self, pod: str, node: str, res: str, n: int = 1) -> None:
        limits = {res: str(n)}
        self.pods.append(
            {
                "metadata": {"name": pod, "namespace": "default", "uid": pod},
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "c", "resources": {"limits": limits}}],
                },
            }
        )


def node_backend() -> tuple[NodeBackend, FakeCore]:
    backend = NodeBackend(None)
    core = FakeCore()
    backend.nodes = NodeStatus.__new__(NodeStatus)
    backend.nodes.__dict__.update(_core=core, domain=D, _prefix=D + "/")
    return backend, core


def ledger_backend() -> tuple[LedgerBackend, Ledger]:
    ledger = Ledger(D)
    for n, labels in NODES.items():
        ledger.upsert_node(n, labels, {"cpu": 4000, "memory": 8 << 30, "pods": 110})
    return LedgerBackend(ledger, D), ledger


@pytest.fixture
def extender() -> Iterator[tuple[ExtenderBackend, TestClient]]:
    settings = Settings(kube=False, token="t")
    svc = Service(settings)
    for n, labels in NODES.items():  # as the cluster view would, with a cluster
        svc.ledger.upsert_node(n, labels, {"cpu": 4000, "memory": 8 << 30, "pods": 110})
    with TestClient(create_app(settings, svc)) as tc:
        tc.headers["Authorization"] = "Bearer t"
        pc = PolicyClient("http://testserver", token="t")
        pc._http = tc
        yield ExtenderBackend(pc), tc


def backends(extender: tuple[ExtenderBackend, TestClient]) -> list[Backend]:
    return [extender[0], ledger_backend()[0], node_backend()[0]]


SEMANTICS: list[tuple[dict[str, Any], dict[str, int]]] = [
    ({}, {"n1": 2, "n2": 2, "n3": 2}),
    ({"node": "n2"}, {"n2": 2}),
    ({"num_nodes": 2}, {"n1": 2, "n2": 2}),
    ({"node_spec": {"cpu": "4", "memory": "1Gi"}}, {"n1": 2, "n2": 2, "n3": 2}),
    ({"node_selector": {"pool": "a"}}, {"n1": 2, "n2": 2}),
]


@pytest.mark.parametrize(("target", "expect"), SEMANTICS)
def test_set_resource_means_the_same_on_every_backend(
    extender: tuple[ExtenderBackend, TestClient], target: dict[str, Any], expect: dict[str, int]
) -> None:
    for b in backends(extender):
        assert b.set_resource("r", 2, **target) == expect, type(b).__name__
        state = b.cluster_state()
        assert {n: s[f"{D}/r"].capacity for n, s in state.nodes.items() if f"{D}/r" in s} == expect
        b.delete_resource("r")
        b.delete_resource("r")  # absent: nothing to do, no error
        assert not any(f"{D}/r" in s for s in b.cluster_state().nodes.values())


REFUSALS: list[tuple[Callable[[Backend], Any], int, str | None]] = [
    (lambda b: b.set_resource("bad!", 1), 422, "name"),
    (lambda b: b.set_resource("r", 1, node_spec={"cpu": "64"}), 422, "node_spec"),
    (lambda b: b.set_resource("r", 1, node="n1", node_spec={"cpu": "1"}), 422, None),
]


@pytest.mark.parametrize(("call", "status", "field"), REFUSALS)
def test_refusals_are_typed_the_same_on_every_backend(
    extender: tuple[ExtenderBackend, TestClient],
    call: Callable[[Backend], Any],
    status: int,
    field: str | None,
) -> None:
    for b in backends(extender):
        with pytest.raises((BackendError, ValueError)) as e:
            call(b)
        if isinstance(e.value, BackendError):
            assert (e.value.status, e.value.field) == (status, field), type(b).__name__
        else:  # two node fields at once: refused by the request model before any call
            assert "at most one of" in str(e.value)


def test_unknown_node_is_404_where_nodes_are_not_learnt() -> None:
    # (The standalone service behind the ExtenderBackend above learns nodes from requests.)
    for b in (ledger_backend()[0], node_backend()[0]):
        with pytest.raises(BackendError) as e:
            b.set_resource("r", 1, node="nope")
        assert (e.value.status, e.value.field) == (404, "node")


def test_below_allocated_is_409_on_the_ledger_and_node_backends() -> None:
    lb, ledger = ledger_backend()
    lb.set_resource("r", 2, node="n1")
    ledger.observe_bound("p1", "n1", {f"{D}/r": 2})
    nb, core = node_backend()
    nb.set_resource("r", 2, node="n1")
    core.bind("p1", "n1", f"{D}/r", 2)
    for b in (lb, nb):
        with pytest.raises(BackendError) as e:
            b.set_resource("r", 1, node="n1")
        assert (e.value.status, e.value.field) == (409, "capacity")


def test_node_backend_patches_only_the_domain_keys_it_changes() -> None:
    b, core = node_backend()
    b.set_resource("r", 2, num_nodes=2)
    b.set_resource("r", 2, num_nodes=2)  # no change: no patch
    b.set_resource("r", 3, node="n1")
    assert [n for n, _ in core.patches] == ["n1", "n2", "n1"]
    assert core.patches[-1][1] == {
        "status": {"capacity": {f"{D}/r": "3"}, "allocatable": {f"{D}/r": "3"}}
    }
    b.delete_resource("r")
    assert core.patches[-1][1]["status"]["allocatable"] == {f"{D}/r": None}
    assert core.nodes["n1"]["status"]["allocatable"]["x.io/gpu"] == "1"  # not ours: untouched


def test_node_backend_reads_usage_from_bound_pods() -> None:
    b, core = node_backend()
    b.set_resource("r", 3)
    for i in range(3):  # more pods than a page: every page is read
        core.bind(f"p{i}", "n2", f"{D}/r")
    state = b.cluster_state()
    assert state.nodes["n2"][f"{D}/r"].allocated == 3
    assert state.nodes["n2"]["pods"].allocated == 3 and state.nodes["n2"]["cpu"].capacity == 4000
    assert state.nodes["n1"]["x.io/gpu"].capacity == 1


def test_ledger_backend_remembers_an_unconfirmed_write() -> None:
    answers = [True, False]
    seen: list[tuple[int, list[str]]] = []

    def wait(version: int, nodes: list[str]) -> bool:
        seen.append((version, nodes))
        return answers.pop(0)

    ledger = Ledger(D)
    ledger.upsert_node("n1", {}, {})
    b = LedgerBackend(ledger, D, wait=wait)
    b.set_resource("r", 1)
    assert b.durable
    b.delete_resource("r")
    assert not b.durable and seen[-1] == (ledger.version, ["n1"])
    b.begin()
    assert b.durable
    b.delete_resource("r")  # nothing to remove: nothing to wait for
    assert b.durable and len(seen) == 2
