"""Every hostile input issue 10 reproduced, replayed against the served app (standalone mode,
in process): each is refused with a 4xx that names the field, and nothing changes.

The cases are the issue's own list: quantities that froze the loop or were 500s, fields of
the wrong JSON type, negatives and fractions that over-committed a node, capacities above
Kubernetes' cap, JSON nested 10,000 deep, a non-ASCII bearer token, node names that created
nodes in standalone mode. What "nothing changes" means: the cluster state (every node's
capacities and allocations, the resources) is the same after.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from extender.app import create_app
from extender.service import Service
from extender.settings import Settings

TOKEN = "t"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NODES = ["n1", "n2"]
LIMITS = "Pod.spec.containers[0].resources.limits"


def pod(metadata: dict[str, Any] | None = None, spec: dict[str, Any] | None = None) -> object:
    return {
        "metadata": metadata or {"name": "p", "namespace": "d", "uid": "u1"},
        "spec": spec or {"containers": [{"resources": {"limits": {"escher.io/x": "1"}}}]},
    }


def asking(amount: object) -> object:
    return pod(spec={"containers": [{"resources": {"limits": {"escher.io/x": amount}}}]})


def annotated(annotations: object, labels: object = None) -> object:
    meta: dict[str, Any] = {"name": "p", "uid": "u1", "annotations": annotations}
    if labels is not None:
        meta["labels"] = labels
    return pod(metadata=meta)


# (id, method, path, JSON body, status, the field the reply must name)
CASES: list[tuple[str, str, str, object, int, str]] = [
    ("huge-exponent", "POST", "/filter", {"Pod": asking("1e1000000"), "NodeNames": NODES},
     400, f"{LIMITS}[escher.io/x]"),
    ("nan", "POST", "/filter", {"Pod": asking("NaN"), "NodeNames": NODES},
     400, f"{LIMITS}[escher.io/x]"),
    ("infinity", "POST", "/filter", {"Pod": asking("Infinity"), "NodeNames": NODES},
     400, f"{LIMITS}[escher.io/x]"),
    ("snan", "POST", "/filter", {"Pod": asking("sNaN"), "NodeNames": NODES},
     400, f"{LIMITS}[escher.io/x]"),
    ("negative", "POST", "/filter", {"Pod": asking("-5"), "NodeNames": NODES},
     400, f"{LIMITS}[escher.io/x]"),
    ("fraction", "POST", "/filter", {"Pod": asking("0.5"), "NodeNames": NODES},
     400, f"{LIMITS}[escher.io/x]"),
    ("boolean-quantity", "POST", "/filter", {"Pod": asking(True), "NodeNames": NODES},
     400, f"{LIMITS}[...]"),
    ("resources-list", "POST", "/filter",
     {"Pod": pod(spec={"containers": [{"resources": []}]}), "NodeNames": NODES},
     400, "Pod.spec.containers[0].resources"),
    ("limits-string", "POST", "/filter",
     {"Pod": pod(spec={"containers": [{"resources": {"limits": "x"}}]}), "NodeNames": NODES},
     400, LIMITS),
    ("requests-number", "POST", "/filter",
     {"Pod": pod(spec={"containers": [{"resources": {"requests": 1}}]}), "NodeNames": NODES},
     400, "Pod.spec.containers[0].resources.requests"),
    ("overhead-list", "POST", "/filter",
     {"Pod": pod(spec={"containers": [], "overhead": []}), "NodeNames": NODES},
     400, "Pod.spec.overhead"),
    ("labels-list", "POST", "/filter",
     {"Pod": pod(metadata={"name": "p", "uid": "u1", "labels": ["a"]}), "NodeNames": NODES},
     400, "Pod.metadata.labels"),
    ("gang-annotations-string", "POST", "/filter",
     {"Pod": annotated("x", labels={"escher.io/gang": "g"}), "NodeNames": NODES},
     400, "Pod.metadata.annotations"),
    ("prefer-list", "POST", "/prioritize",
     {"Pod": annotated({"escher.io/prefer": ["a"]}), "NodeNames": NODES},
     400, "Pod.metadata.annotations[...]"),
    ("pack-number", "POST", "/prioritize",
     {"Pod": annotated({"escher.io/pack": 3}), "NodeNames": NODES},
     400, "Pod.metadata.annotations[...]"),
    ("nodes-item-metadata-list", "POST", "/filter",
     {"Pod": pod(), "Nodes": {"items": [{"metadata": []}]}},
     400, "Nodes.items[0].metadata.name"),
    ("empty-node-name", "POST", "/filter", {"Pod": pod(), "NodeNames": [""]},
     400, "NodeNames[0]"),
    ("null-node-names-prioritize", "POST", "/prioritize", {"Pod": pod(), "NodeNames": [None]},
     400, "NodeNames[0]"),
    ("node-spec-nan", "PUT", "/v1/resources/x", {"capacity": 1, "node_spec": {"cpu": "NaN"}},
     422, "node_spec[cpu]"),
    ("capacity-above-cap", "PUT", "/v1/resources/x", {"capacity": 10**400},
     422, "capacity"),
    ("negative-capacity", "PUT", "/v1/resources/x", {"capacity": -1},
     422, "capacity"),
    ("unknown-node-standalone", "PUT", "/v1/resources/x", {"capacity": 0, "node": "new"},
     404, "node"),
    # A precondition on an object, where policies are not objects; one that is no version.
    ("version-standalone", "PUT", "/v1/resources/y?resourceVersion=7", {"capacity": 3},
     422, "resourceVersion"),
    ("version-not-digits", "PUT", "/v1/resources/y?resourceVersion=7x", {"capacity": 3},
     422, "query.resourceVersion"),
]  # fmt: skip


@pytest.fixture(scope="module")  # one app: each test compares the state before and after it
def http() -> Iterator[TestClient]:
    svc = Service(Settings(mode="standalone", token=TOKEN))
    for n in NODES:
        svc.ledger.upsert_node(n, {}, {"cpu": 4000, "memory": 8 << 30, "pods": 110})
    with TestClient(create_app(svc.settings, svc), headers=AUTH) as client:
        assert client.put("/v1/resources/y", json={"capacity": 2}).status_code == 200
        yield client


def state(http: TestClient) -> object:
    reply = http.get("/v1/cluster-state")
    assert reply.status_code == 200
    return reply.json()


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "field"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_hostile_input_is_refused_naming_the_field_and_changes_nothing(
    http: TestClient, method: str, path: str, body: object, status: int, field: str
) -> None:
    before = state(http)
    reply = http.request(method, path, json=body)
    assert reply.status_code == status, reply.text
    assert reply.json()["field"] == field
    assert state(http) == before


def test_json_nested_ten_thousand_deep_is_a_400(http: TestClient) -> None:
    before = state(http)
    deep = b"[" * 10_000 + b"]" * 10_000
    reply = http.post(
        "/v1/esl/colocation", content=deep, headers={"Content-Type": "application/json"}
    )
    assert reply.status_code == 400 and "nested" in reply.json()["error"]
    assert state(http) == before


def test_a_non_ascii_bearer_token_is_a_401(http: TestClient) -> None:
    reply = http.get("/v1/cluster-state", headers={"Authorization": "Bearer ée".encode("latin-1")})
    assert reply.status_code == 401


@pytest.mark.parametrize(("method", "path"), [("PUT", "/v1/resources/x"), ("POST", "/filter")])
def test_a_chunked_body_over_the_limit_is_a_413_on_every_route(method: str, path: str) -> None:
    """Without a Content-Length the edge counts while reading; on the policy routes FastAPI
    reads the body and used to turn the limit into a 400 ("error parsing the body")."""
    settings = Settings(mode="standalone", token=TOKEN, max_body_bytes=1024)

    def chunks() -> Iterator[bytes]:
        yield b'{"capacity": 1, "pad": "'
        for _ in range(64):
            yield b"x" * 64

    with TestClient(create_app(settings), headers=AUTH) as client:
        reply = client.request(method, path, content=chunks())
        assert reply.status_code == 413, reply.text
        assert client.get("/v1/resources/x").status_code == 404  # nothing was created


@pytest.mark.parametrize(
    ("metrics_auth", "token", "status"),
    [(False, None, 200), (True, None, 401), (True, "wrong", 401), (True, TOKEN, 200)],
    ids=["open", "protected-no-token", "protected-wrong-token", "protected-token"],
)
def test_metrics_take_the_policy_apis_credentials_when_protected(
    metrics_auth: bool, token: str | None, status: int
) -> None:
    settings = Settings(mode="standalone", token=TOKEN, metrics_auth=metrics_auth)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with TestClient(create_app(settings)) as client:
        assert client.get("/metrics", headers=headers).status_code == status
