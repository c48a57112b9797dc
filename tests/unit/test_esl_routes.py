"""The /v1/esl endpoints in standalone mode: create, list, step, signal and delete ESL
instances; clear 4xx replies naming the problem; nothing left behind by a refusal or a
delete; auth and OpenAPI."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from extender.app import create_app
from extender.service import Service
from extender.settings import Settings

TOKEN = "t"
D = "escher.io"
NODES = ("node-0", "node-1", "node-2", "node-3")


@pytest.fixture
def svc() -> Service:
    settings = Settings(kube=False, token=TOKEN)
    service = Service(settings)
    for n in NODES:  # as the cluster view would fill it, with a cluster
        service.ledger.upsert_node(
            n, {"zone": "a" if n < "node-2" else "b"}, {"cpu": 4000, "memory": 8 << 30, "pods": 110}
        )
    return service


@pytest.fixture
def client(svc: Service) -> Iterator[TestClient]:
    with TestClient(create_app(svc.settings, svc)) as c:
        c.headers["Authorization"] = f"Bearer {TOKEN}"
        yield c


def ours(svc: Service) -> set[str]:
    return {r for v in svc.ledger.snapshot().nodes.values() for r in v.ephemeral}


CREATE: list[tuple[str, dict[str, Any], list[str], dict[str, dict[str, str]]]] = [
    (
        "colocation",
        {"name": "web", "groups": {"a": 2}, "cpu": "1"},
        [f"{D}/coloc-web-a"],
        {"a": {f"{D}/coloc-web-a": "1", "cpu": "1"}},
    ),
    ("antiaffinity", {"name": "x", "pods": 4}, [f"{D}/anti-x"], {"": {f"{D}/anti-x": "1"}}),
    ("loadbalance", {"name": "x", "tasks": 6}, [f"{D}/lb-x"], {"": {f"{D}/lb-x": "1"}}),
    ("locality", {"name": "x", "node": "node-2"}, [f"{D}/data-x"], {"": {f"{D}/data-x": "1"}}),
    ("binpack", {"name": "x"}, [f"{D}/pack-x"], {"": {f"{D}/pack-x": "1", "cpu": "1"}}),
    (
        "sequencing",
        {"name": "x", "stages": ["a", "b"]},
        [f"{D}/seq-x-a"],
        {"a": {f"{D}/seq-x-a": "1"}, "b": {f"{D}/seq-x-b": "1"}},
    ),
    ("queues", {"name": "x", "weights": {"a": 1}, "slots": 2}, [], {"a": {f"{D}/q-x-a": "1"}}),
    (
        "fairshare",
        {"name": "x", "slots": 2, "groups": {"g": {"users": {"u": 1}}}},
        [],
        {"u": {f"{D}/fs-x-u": "1"}},
    ),
    (
        "soft",
        {"name": "x", "alternatives": [{"node_selector": {"zone": "b"}}, {}]},
        [f"{D}/soft-x", f"{D}/soft-x-0", f"{D}/soft-x-1"],
        {"": {f"{D}/soft-x": "1"}},
    ),
    (
        "compose",
        {
            "name": "x",
            "op": "and",
            "pods": 2,
            "parts": [
                {"kind": "colocation", "params": {"name": "g", "groups": {"a": 2}}},
                {"kind": "loadbalance", "params": {"name": "l", "tasks": 8}},
            ],
        },
        [f"{D}/coloc-g-a", f"{D}/lb-l"],
        {"a": {f"{D}/coloc-g-a": "1", f"{D}/lb-l": "1"}},
    ),
]


@pytest.mark.parametrize(("kind", "body", "resources", "limits"), CREATE)
def test_create_get_and_delete_every_kind(
    client: TestClient,
    svc: Service,
    kind: str,
    body: dict[str, Any],
    resources: list[str],
    limits: dict[str, dict[str, str]],
) -> None:
    r = client.post(f"/v1/esl/{kind}", json=body)
    assert r.status_code == 201, r.text
    view = r.json()
    iid = f"{kind}-{body['name']}"
    assert (view["id"], view["resources"], view["durable"]) == (iid, resources, True)
    assert {k: v["limits"] for k, v in view["requests"].items()} == limits
    assert ours(svc) == set(resources)
    assert client.get(f"/v1/esl/{iid}").json() == view
    assert [v["id"] for v in client.get("/v1/esl").json()] == [iid]
    d = client.delete(f"/v1/esl/{iid}")
    assert d.status_code == 200 and d.json() == {"id": iid, "removed": resources, "durable": True}
    assert ours(svc) == set()
    assert client.get(f"/v1/esl/{iid}").status_code == 404


BAD: list[tuple[str, str, Any, int, str, str | None]] = [
    ("post", "/v1/esl/teleport", {"name": "x"}, 404, "unknown ESL kind 'teleport'", "kind"),
    ("post", "/v1/esl/gang", {"name": "x"}, 404, "unknown ESL kind 'gang'", "kind"),
    ("post", "/v1/esl/antiaffinity", b"{nope", 400, "body is not valid JSON", None),
    ("post", "/v1/esl/antiaffinity", None, 422, "Input should be a valid dictionary", None),
    ("post", "/v1/esl/colocation", {"name": "x"}, 422, "groups: Field required", "groups"),
    ("post", "/v1/esl/antiaffinity", {"name": "x", "podz": 1}, 422, "podz: Extra", "podz"),
    ("post", "/v1/esl/locality", {"name": "x"}, 422, "exactly one of node, node_selector", None),
    ("post", "/v1/esl/antiaffinity", {"name": "x", "pods": 5}, 422, "need 5 nodes", "pods"),
    ("post", "/v1/esl/locality", {"name": "x", "node": "nope"}, 201, "", None),  # learnt
    (
        "post",
        "/v1/esl/colocation",
        {"name": "x", "groups": {"a": 5}, "cpu": "1"},
        422,
        "can never share a node",
        "groups",
    ),
    (
        "post",
        "/v1/esl/compose",
        {
            "name": "x",
            "op": "and",
            "pods": 5,
            "parts": [
                {"kind": "antiaffinity", "params": {"name": "a"}},
                {"kind": "colocation", "params": {"name": "g", "groups": {"all": 5}}},
            ],
        },
        422,
        "composition x: group all of 5 members",
        "groups",
    ),
    ("get", "/v1/esl/nope", None, 404, "no ESL instance 'nope'", "id"),
    ("post", "/v1/esl/nope/step", None, 404, "no ESL instance 'nope'", "id"),
    ("delete", "/v1/esl/nope", None, 404, "no ESL instance 'nope'", "id"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "fragment", "field"), BAD)
def test_bad_calls_are_clear_4xx_and_leave_nothing(
    client: TestClient,
    svc: Service,
    method: str,
    path: str,
    body: Any,
    status: int,
    fragment: str,
    field: str | None,
) -> None:
    kwargs: dict[str, Any] = {}
    if isinstance(body, bytes):
        kwargs["content"] = body
    elif body is not None or method == "post":
        kwargs["json"] = body
    r = client.request(method.upper(), path, **kwargs)
    assert r.status_code == status, r.text
    if status >= 400:
        assert fragment in r.json()["error"] and r.json().get("field") == field
        assert ours(svc) == set() and client.get("/v1/esl").json() == []


def test_a_name_in_use_is_409(client: TestClient) -> None:
    body = {"name": "x", "tasks": 4}
    assert client.post("/v1/esl/loadbalance", json=body).status_code == 201
    r = client.post("/v1/esl/loadbalance", json=body)
    assert r.status_code == 409 and "loadbalance-x exists" in r.json()["error"]


def test_step_advances_a_dynamic_policy(client: TestClient, svc: Service) -> None:
    assert client.post("/v1/esl/loadbalance", json={"name": "d", "mode": "dynamic"}).is_success
    for i, n in enumerate(NODES):  # every node's unit used
        svc.ledger.observe_bound(f"p{i}", n, {f"{D}/lb-d": 1})
    r = client.post("/v1/esl/loadbalance-d/step")
    assert r.status_code == 200
    view = r.json()
    assert view["steps"] == 1 and view["changes"][0]["nodes"] == dict.fromkeys(NODES, 2)
    assert svc.ledger.node("node-0").ephemeral == {f"{D}/lb-d": 2}  # type: ignore[union-attr]


def test_step_takes_a_backlog_where_the_policy_shares_by_demand(client: TestClient) -> None:
    body = {"name": "j", "weights": {"a": 2, "b": 1}, "slots": 3}
    assert client.post("/v1/esl/queues", json=body).is_success
    r = client.post("/v1/esl/queues-j/step", json={"backlog": {"a": 0, "b": 5}})
    totals = {c["resource"]: sum(c["nodes"].values()) for c in r.json()["changes"]}
    assert totals == {f"{D}/q-j-b": 3}  # a has nothing waiting: b takes every slot
    bad = client.post("/v1/esl/queues-j/step", json={"backlog": {"c": 1}})
    assert bad.status_code == 404 and "no key 'c'" in bad.json()["error"]


@pytest.mark.parametrize(
    ("kind", "body", "call", "status", "fragment"),
    [
        ("locality", {"name": "x", "node": "node-0"}, "step", 409, "has no step"),
        ("locality", {"name": "x", "node": "node-0"}, "signal/a", 409, "takes no signals"),
        ("sequencing", {"name": "x", "stages": ["a", "b"]}, "signal/c", 404, "no key 'c'"),
        ("loadbalance", {"name": "x", "tasks": 2}, "step", 200, ""),  # static: a no-op
    ],
)
def test_step_and_signal_refusals(
    client: TestClient, kind: str, body: dict[str, Any], call: str, status: int, fragment: str
) -> None:
    assert client.post(f"/v1/esl/{kind}", json=body).is_success
    r = client.post(f"/v1/esl/{kind}-x/{call}")
    assert r.status_code == status, r.text
    assert fragment in r.json().get("error", "")


def test_signal_opens_the_next_stage(client: TestClient, svc: Service) -> None:
    client.post("/v1/esl/sequencing", json={"name": "s", "stages": ["a", "b"]})
    r = client.post("/v1/esl/sequencing-s/signal/a")
    assert r.status_code == 200 and r.json()["resources"] == [f"{D}/seq-s-b"]
    assert ours(svc) == {f"{D}/seq-s-b"}


def test_the_service_loop_steps_http_instances(svc: Service) -> None:
    svc.esls.create("loadbalance", {"name": "d", "mode": "dynamic"})
    for i, n in enumerate(NODES):
        svc.ledger.observe_bound(f"p{i}", n, {f"{D}/lb-d": 1})
    svc.esls.step_all()
    assert svc.esls.get("loadbalance-d").steps == 1
    assert svc.ledger.node("node-3").ephemeral == {f"{D}/lb-d": 2}  # type: ignore[union-attr]


def test_the_token_is_required(client: TestClient) -> None:
    del client.headers["Authorization"]
    for method, path in [("GET", "/v1/esl"), ("POST", "/v1/esl/antiaffinity")]:
        r = client.request(method, path, json={"name": "x"})
        assert r.status_code == 401, path


def test_openapi_documents_the_endpoints_with_models(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    create = paths["/v1/esl/{kind}"]["post"]
    assert set(create["responses"]) >= {"201", "202"}
    body = create["requestBody"]["content"]["application/json"]["schema"]["oneOf"]
    assert {s["title"] for s in body} >= {"ColocationParams", "ComposeParams", "SoftParams"}
    assert "InstanceView" in spec["components"]["schemas"]
    assert "DeleteView" in str(paths["/v1/esl/{iid}"]["delete"]["responses"]["200"])
    assert {"/v1/esl", "/v1/esl/{iid}/step", "/v1/esl/{iid}/signal/{key}"} <= set(paths)
