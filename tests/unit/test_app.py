"""The HTTP surface in standalone mode (no Kubernetes): status codes, messages, no change on
refusal, auth, OpenAPI and metrics."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from extender.app import create_app
from extender.settings import Settings

TOKEN = "s3cret"
JSON = "application/json"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def client() -> Iterator[TestClient]:
    app = create_app(Settings(kube=False, token=TOKEN, max_body_bytes=100_000))
    with TestClient(app) as c:
        c.headers.update(AUTH)
        assert c.put("/v1/resources/gpu", json={"capacity": 2, "node": "n1"}).status_code == 200
        assert c.put("/v1/resources/gpu", json={"capacity": 1, "node": "n2"}).status_code == 200
        yield c


def pod(uid: str = "u1", gpu: str | None = "1") -> dict[str, Any]:
    limits = {"escher.io/gpu": gpu} if gpu else {}
    return {
        "metadata": {"name": f"p-{uid}", "namespace": "default", "uid": uid},
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
    }


BAD = [
    # (method, path, kwargs, status, message fragment)
    ("post", "/filter", {"content": b"{not json"}, 400, "body is not valid JSON"),
    ("post", "/filter", {"json": {"Pod": 3, "NodeNames": []}}, 422, "Pod: Input should be"),
    ("post", "/filter", {"json": {"NodeNames": ["n1"]}}, 422, "Pod: Field required"),
    ("post", "/filter", {"json": {"Pod": pod(), "NodeNames": "n1"}}, 422, "NodeNames"),
    ("post", "/filter", {"json": {"Pod": pod()}}, 400, "neither Nodes nor NodeNames"),
    (
        "post",
        "/filter",
        {"json": {"Pod": pod(gpu="x"), "NodeNames": ["n1"]}},
        400,
        "invalid quantity",
    ),
    ("post", "/prioritize", {"content": b"[]"}, 422, "Input should be an object"),
    ("post", "/bind", {"json": {"PodName": "p"}}, 422, "PodNamespace: Field required"),
    ("post", "/filter", {"content": b"x" * 100_001}, 413, "larger than 100000 bytes"),
    ("post", "/filter", {"content": iter([b"x" * 60_000] * 2)}, 413, "larger than 100000"),
    ("get", "/nope", {}, 404, "no such path: GET /nope"),
    ("get", "/filter", {}, 405, "method GET is not allowed"),
    (
        "put",
        "/v1/resources/gpu",
        {"content": b"{", "headers": {"content-type": JSON}},
        400,
        "not valid JSON",
    ),
    ("put", "/v1/resources/gpu", {"json": {"capacity": -1}}, 422, "body.capacity"),
    ("put", "/v1/resources/gpu", {"json": {"capacity": 1.5}}, 422, "body.capacity"),
    ("put", "/v1/resources/gpu", {"json": {"capacity": "3"}}, 422, "body.capacity"),
    ("put", "/v1/resources/gpu", {"json": {}}, 422, "body.capacity: Field required"),
    ("put", "/v1/resources/gpu", {"json": {"capacity": 1, "nodes": "n1"}}, 422, "body.nodes"),
    ("put", "/v1/resources/gpu", {"json": {"capacity": 1, "num_nodes": 0}}, 422, "body.num_nodes"),
    ("put", "/v1/resources/bad!name", {"json": {"capacity": 1}}, 422, "resource name"),
    (
        "put",
        "/v1/resources/gpu",
        {"json": {"capacity": 1, "node_selector": {"a": "b"}}},
        422,
        "node_selector {'a': 'b'} matches no node",
    ),
    (
        "put",
        "/v1/resources/gpu",
        {"json": {"capacity": 1, "node_spec": {"cpu": "1"}}},
        422,
        "node_spec",
    ),
    (
        "put",
        "/v1/resources/gpu",
        {"json": {"capacity": 1, "node_spec": {"cpu": "lots"}}},
        422,
        "invalid quantity",
    ),
    (
        "put",
        "/v1/resources/gpu",
        {"json": {"capacity": 1, "node": "n1", "node_spec": {}}},
        422,
        "at most one of",
    ),
    ("delete", "/v1/resources/absent", {}, 404, "resource escher.io/absent not found"),
    ("get", "/v1/resources/absent", {}, 404, "not found"),
]


@pytest.mark.parametrize(("method", "path", "kwargs", "status", "fragment"), BAD)
def test_bad_input_is_a_clear_4xx_and_changes_nothing(
    client: TestClient,
    method: str,
    path: str,
    kwargs: dict[str, Any],
    status: int,
    fragment: str,
) -> None:
    before = client.get("/v1/cluster-state").json()
    r = getattr(client, method)(path, **kwargs)
    assert r.status_code == status, r.text
    assert fragment in r.json()["error"]
    after = client.get("/v1/cluster-state").json()
    assert after == before


def test_shrinking_below_allocated_is_refused_atomically(client: TestClient) -> None:
    client.post("/filter", json={"Pod": pod("u1", "2"), "NodeNames": ["n1"]})
    # standalone mode binds nothing, so hold through the service's ledger directly
    ledger = client.app.state.service.ledger  # type: ignore[attr-defined]
    assert ledger.hold("u1", "n1", {"escher.io/gpu": 2}) is None
    before = client.get("/v1/cluster-state").json()
    r = client.put("/v1/resources/gpu", json={"capacity": 1})
    assert r.status_code == 409
    assert r.json() == {
        "error": "n1: escher.io/gpu capacity 1 is below the 2 already allocated",
        "field": "capacity",
    }
    assert client.get("/v1/cluster-state").json() == before


def test_auth(client: TestClient) -> None:
    for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong"}):
        r = client.get("/v1/cluster-state", headers=headers)
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == "Bearer"
    # the extender verbs and health stay open: kube-scheduler sends no policy token
    assert client.get("/healthz", headers={"Authorization": ""}).status_code == 200


def test_set_resource_targets(client: TestClient) -> None:
    r = client.put("/v1/resources/anti", json={"capacity": 1})
    assert r.status_code == 200 and r.json()["nodes"] == {"n1": 1, "n2": 1}
    r = client.put("/v1/resources/anti", json={"capacity": 3, "num_nodes": 1})
    assert r.json()["nodes"] == {"n1": 3}
    assert client.get("/v1/resources/anti").json()["nodes"] == {
        "n1": {"capacity": 3, "allocated": 0, "available": 3},
        "n2": {"capacity": 1, "allocated": 0, "available": 1},
    }
    r = client.put("/v1/resources/anti", json={"capacity": 0, "node": "n2"})
    assert r.json()["nodes"] == {"n2": 0}
    r = client.delete("/v1/resources/anti")
    assert r.status_code == 200 and r.json()["removed_from"] == ["n1"]


def test_filter_and_prioritize_round(client: TestClient) -> None:
    r = client.post("/filter", json={"Pod": pod(), "NodeNames": ["n1", "n2", "n3"]})
    assert r.status_code == 200
    assert r.json() == {
        "NodeNames": ["n1", "n2"],
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {"n3": "node(s) lack escher.io/gpu"},
        "Error": "",
    }
    r = client.post("/prioritize", json={"Pod": pod(), "NodeNames": ["n1", "n2"]})
    assert r.json() == [{"Host": "n1", "Score": 5}, {"Host": "n2", "Score": 0}]
    # a verb configured with a leading slash: kube-scheduler then calls //filter
    r = client.post("http://testserver//filter", json={"Pod": pod(gpu=None), "NodeNames": ["x"]})
    assert r.json()["NodeNames"] == ["x"]
    state = client.get("/v1/cluster-state").json()["nodes"]
    assert state["n1"]["escher.io/gpu"] == {"capacity": 2, "allocated": 0, "available": 2}
    assert state["n3"] == {}


def test_openapi_documents_every_route(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    for path in (
        "/filter",
        "/prioritize",
        "/bind",
        "/v1/resources/{name}",
        "/v1/cluster-state",
        "/healthz",
        "/readyz",
        "/metrics",
    ):
        assert path in spec["paths"], path
    body = spec["paths"]["/filter"]["post"]["requestBody"]["content"]["application/json"]
    assert set(body["schema"]["properties"]) == {"Pod", "Nodes", "NodeNames"}


def test_metrics_count_calls(client: TestClient) -> None:
    client.post("/filter", json={"Pod": pod(), "NodeNames": ["n1", "n3"]})
    client.get("/nope")
    text = client.get("/metrics").text
    assert 'escher_extender_request_seconds_count{verb="filter"} 1.0' in text
    assert 'escher_extender_decisions_total{outcome="rejected",verb="filter"} 1.0' in text
    assert 'escher_extender_bad_requests_total{path="/nope"} 1.0' in text
    assert "escher_ledger_nodes 3.0" in text
