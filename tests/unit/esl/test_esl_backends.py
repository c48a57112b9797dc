"""The three Backends behave as one: the same set_resource semantics, the same cluster state
and the same refusals (the core's errors, with the same field), whether through the policy
API (ExtenderBackend, against the real app in standalone mode, served in-process), the ledger
in-process (LedgerBackend) or Node objects (NodeBackend, over a fake CoreV1Api)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from eslapp import BASE, NODES, PHYSICAL, TOKEN, served, service

from extender.app import create_app
from extender.core.errors import Conflict, CoreError, InvalidValue, NoMatch, UnknownNode
from extender.core.ledger import Ledger
from extender.core.quantity import InvalidQuantity
from extender.esl.backends import ExtenderBackend, LedgerBackend
from extender.esl.base import Backend
from extender.esl.client import PolicyClient
from extender.esl.kube.nodestatus import NodeBackend
from extender.policies.api import ResourceSpec
from extender.service import Service

D = "escher.io"


class Raw:
    """A urllib3 response as the kubernetes client returns it with _preload_content=False."""

    def __init__(self, obj: Any) -> None:
        self.data = json.dumps(obj).encode()

    def read(self) -> bytes:
        return self.data

    def release_conn(self) -> None:
        pass


class FakeCore:
    """The CoreV1Api calls NodeBackend makes: nodes, bound pods (paged), status patches."""

    def __init__(self, page: int = 2) -> None:
        allocatable = {"cpu": "4", "memory": "8Gi", "pods": "110", "x.io/gpu": "1"}
        self.nodes = {
            n: {
                "metadata": {"name": n, "labels": labels},
                "status": {"allocatable": dict(allocatable)},
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
        self.pods.append(
            {
                "metadata": {"name": pod, "namespace": "default", "uid": pod},
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "c", "resources": {"limits": {res: str(n)}}}],
                },
            }
        )


def node_backend() -> tuple[NodeBackend, FakeCore]:
    backend = NodeBackend(None)  # type: ignore[arg-type]
    core = FakeCore()
    backend._core = core  # type: ignore[assignment]  # the only seam: its CoreV1Api
    return backend, core


def ledger_backend() -> tuple[LedgerBackend, Ledger]:
    ledger = Ledger(D)
    for n, labels in NODES.items():
        ledger.upsert_node(n, labels, PHYSICAL)
    return LedgerBackend(ledger, D), ledger


@pytest.fixture
def extender() -> Iterator[tuple[ExtenderBackend, Service]]:
    svc = service()
    with (
        served(create_app(svc.settings, svc)) as transport,
        PolicyClient(BASE, token=TOKEN, transport=transport) as pc,
    ):
        yield ExtenderBackend(pc), svc


@pytest.fixture
def backends(
    extender: tuple[ExtenderBackend, Service],
) -> dict[str, tuple[Backend, Callable[[str, str, int], None]]]:
    """Each backend, and how a pod comes to hold units of a resource on a node there."""
    eb, svc = extender
    lb, ledger = ledger_backend()
    nb, core = node_backend()
    return {
        "extender": (eb, lambda res, node, n: svc.ledger.observe_bound("p", node, {res: n})),
        "ledger": (lb, lambda res, node, n: ledger.observe_bound("p", node, {res: n})),
        "node": (nb, lambda res, node, n: core.bind("p", node, res, n)),
    }


def capacities(b: Backend, resource: str) -> dict[str, int]:
    state = b.cluster_state()
    return {n: s[resource].capacity for n, s in state.nodes.items() if resource in s}


SEMANTICS: list[Any] = [
    pytest.param({}, {"n1": 2, "n2": 2, "n3": 2}, id="every-node"),
    pytest.param({"node": "n2"}, {"n2": 2}, id="node"),
    pytest.param({"num_nodes": 2}, {"n1": 2, "n2": 2}, id="num-nodes"),
    pytest.param(
        {"node_spec": {"cpu": "4", "memory": "1Gi"}}, {"n1": 2, "n2": 2, "n3": 2}, id="spec"
    ),
    pytest.param({"node_spec": {"cpu": 4}, "num_nodes": 1}, {"n1": 2}, id="spec-int-cores"),
    pytest.param({"node_selector": {"pool": "a"}}, {"n1": 2, "n2": 2}, id="selector"),
]


@pytest.mark.parametrize(("target", "expect"), SEMANTICS)
def test_set_resource_means_the_same_on_every_backend(
    backends: dict[str, tuple[Backend, Any]], target: dict[str, Any], expect: dict[str, int]
) -> None:
    for name, (b, _) in backends.items():
        assert b.set_resource("r", ResourceSpec(capacity=2, **target)) == expect, name
        assert capacities(b, f"{D}/r") == expect, name
        b.delete_resource("r")
        b.delete_resource("r")  # absent: nothing to do, no error
        assert capacities(b, f"{D}/r") == {}, name


def test_the_cluster_state_is_the_same_on_every_backend(
    backends: dict[str, tuple[Backend, Callable[[str, str, int], None]]],
) -> None:
    seen = {}
    for name, (b, hold) in backends.items():
        b.set_resource("r", ResourceSpec(capacity=3, node_selector={"pool": "a"}))
        hold(f"{D}/r", "n2", 2)
        state = b.cluster_state()
        seen[name] = {
            (n, r): (u.capacity, u.allocated, u.available)
            for n, s in state.nodes.items()
            for r, u in s.items()
            if r in ("cpu", "memory", f"{D}/r")
        }
    assert seen["extender"] == seen["ledger"] == seen["node"]
    assert seen["ledger"][("n2", f"{D}/r")] == (3, 2, 1)
    assert seen["ledger"][("n3", "cpu")] == (4000, 0, 4000)


REFUSALS: list[Any] = [
    pytest.param("bad!", {"capacity": 1}, InvalidValue, "name", id="bad-name"),
    pytest.param("r", {"capacity": 1, "node_spec": {"cpu": "64"}}, NoMatch, "node_spec", id="spec"),
    pytest.param(
        "r", {"capacity": 1, "node_selector": {"pool": "c"}}, NoMatch, "node_selector", id="sel"
    ),
    # Capacity 0 names a node to remove from: even the standalone service, which learns
    # nodes from what it is asked to set, refuses one it does not know.
    pytest.param("r", {"capacity": 0, "node": "nope"}, UnknownNode, "node", id="unknown-node"),
]


@pytest.mark.parametrize(("name", "spec", "error", "field"), REFUSALS)
def test_refusals_are_the_same_core_errors_on_every_backend(
    backends: dict[str, tuple[Backend, Any]],
    name: str,
    spec: dict[str, Any],
    error: type[CoreError],
    field: str,
) -> None:
    for which, (b, _) in backends.items():
        with pytest.raises(CoreError) as e:
            b.set_resource(name, ResourceSpec(**spec))
        assert (type(e.value), e.value.field) == (error, field), which
        assert capacities(b, f"{D}/r") == {}, which


def test_a_quantity_that_is_not_one_is_refused_naming_it_on_every_backend(
    backends: dict[str, tuple[Backend, Any]],
) -> None:
    # The remote backend sees the policy API's 422 and raises InvalidValue; in-process it is
    # the parser's InvalidQuantity: both name the field.
    for which, (b, _) in backends.items():
        with pytest.raises((InvalidValue, InvalidQuantity)) as e:
            b.set_resource("r", ResourceSpec(capacity=1, node_spec={"cpu": "lots"}))
        assert getattr(e.value, "field", None) == "node_spec[cpu]", which


def test_below_allocated_is_a_conflict_and_a_held_resource_is_still_deleted(
    backends: dict[str, tuple[Backend, Callable[[str, str, int], None]]],
) -> None:
    for which, (b, hold) in backends.items():
        b.set_resource("r", ResourceSpec(capacity=2, node="n1"))
        hold(f"{D}/r", "n1", 2)
        with pytest.raises(Conflict) as e:
            b.set_resource("r", ResourceSpec(capacity=1, node="n1"))
        assert e.value.field == "capacity", which
        assert capacities(b, f"{D}/r") == {"n1": 2}, which
        b.delete_resource("r")  # an ESL's teardown: the pods keep running
        assert capacities(b, f"{D}/r") == {}, which


def test_node_backend_patches_only_the_domain_keys_it_changes() -> None:
    b, core = node_backend()
    b.set_resource("r", ResourceSpec(capacity=2, num_nodes=2))
    b.set_resource("r", ResourceSpec(capacity=2, num_nodes=2))  # no change: no patch
    b.set_resource("r", ResourceSpec(capacity=3, node="n1"))
    assert [n for n, _ in core.patches] == ["n1", "n2", "n1"]
    assert core.patches[-1][1] == {
        "status": {"capacity": {f"{D}/r": "3"}, "allocatable": {f"{D}/r": "3"}}
    }
    b.delete_resource("r")
    assert [n for n, _ in core.patches[3:]] == ["n1", "n2"]
    assert core.patches[-1][1]["status"]["allocatable"] == {f"{D}/r": None}
    assert core.nodes["n1"]["status"]["allocatable"]["x.io/gpu"] == "1"  # not ours: untouched


def test_node_backend_reads_usage_from_bound_pods() -> None:
    b, core = node_backend()
    b.set_resource("r", ResourceSpec(capacity=3))
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
    b.set_resource("r", ResourceSpec(capacity=1))
    assert b.durable
    b.delete_resource("r")
    assert not b.durable and seen[-1] == (ledger.version, ["n1"])
    b.begin()
    assert b.durable
    b.delete_resource("r")  # nothing to remove: nothing to wait for
    assert b.durable and len(seen) == 2


@pytest.mark.parametrize(
    ("backend", "in_path"),
    [
        pytest.param(lambda: LedgerBackend(Ledger(D), D), True, id="ledger-default"),
        pytest.param(lambda: LedgerBackend(Ledger(D), D, in_path=False), False, id="ledger-pure"),
        pytest.param(
            lambda: ExtenderBackend(None),  # type: ignore[arg-type]  # not called here
            True,
            id="extender-default",
        ),
        pytest.param(lambda: NodeBackend(None), False, id="node"),  # type: ignore[arg-type]
    ],
)
def test_each_backend_says_whether_the_extender_is_in_the_path(
    backend: Callable[[], Backend], in_path: bool
) -> None:
    b = backend()
    assert isinstance(b, Backend)
    assert (b.domain, b.in_path) == (D, in_path)
