"""The /v1/esl routes (extender.http.esl) through the whole app in standalone mode, served
in-process inside its lifespan (eslapp): what each call answers (201 created, 200, 202 when
the write-back has not confirmed), every refusal as {"error", "field"} with the status of the
one error table (400 bad JSON, 401 no token, 404 unknown kind / instance / key, 409 exists /
unsupported / no room, 422 naming the field, 429 too many), and an OpenAPI document in which
the ESL routes' schemas all resolve."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from eslapp import client, service

from extender.app import create_app
from extender.esl.backends import LedgerBackend
from extender.esl.registry import REGISTRY, Instances
from extender.policies.store import MemoryStore
from extender.service import Service

D = "escher.io"
JSON = "application/json"
COLOC = {"name": "web", "groups": {"a": 2}, "cpu": "1"}
QUEUES = {"name": "jobs", "weights": {"a": 2, "b": 1}, "slots": 3}
STAGES = {"name": "etl", "stages": ["x", "y"]}


def app_of(svc: Service) -> Any:
    return create_app(svc.settings, svc)


@pytest.fixture
def svc() -> Service:
    return service()


@pytest.fixture
def http(svc: Service) -> Iterator[httpx.Client]:
    with client(app_of(svc)) as c:
        yield c


def test_an_instance_is_created_read_stepped_signalled_and_deleted(http: httpx.Client) -> None:
    r = http.post("/v1/esl/colocation", json=COLOC)
    assert r.status_code == 201
    assert r.json() == {
        "id": "colocation-web",
        "kind": "colocation",
        "params": {**COLOC, "memory": None},
        "resources": [f"{D}/coloc-web-a"],
        "requests": {
            "a": {"limits": {f"{D}/coloc-web-a": "1", "cpu": "1"}, "labels": {}, "annotations": {}}
        },
        "dynamic": False,
        "steps": 0,
        "changes": [],
        "durable": True,
    }
    assert http.post("/v1/esl/queues", json=QUEUES).status_code == 201
    assert [v["id"] for v in http.get("/v1/esl").json()] == ["colocation-web", "queues-jobs"]
    assert http.get("/v1/esl/colocation-web").json()["resources"] == [f"{D}/coloc-web-a"]

    r = http.post("/v1/esl/queues-jobs/step", json={"backlog": {"a": 5, "b": 5}})
    assert r.status_code == 200
    view = r.json()
    assert view["dynamic"] and view["steps"] >= 1  # the service's loop may have stepped too
    assert view["resources"] == [f"{D}/q-jobs-a", f"{D}/q-jobs-b"]
    assert view["requests"]["b"]["limits"] == {f"{D}/q-jobs-b": "1"}

    assert http.post("/v1/esl/sequencing", json=STAGES).status_code == 201
    r = http.post("/v1/esl/sequencing-etl/signal/x")
    assert r.status_code == 200
    assert [c["resource"] for c in r.json()["changes"]] == [f"{D}/seq-etl-x", f"{D}/seq-etl-y"]

    r = http.delete("/v1/esl/colocation-web")
    assert (r.status_code, r.json()) == (
        200,
        {"id": "colocation-web", "removed": [f"{D}/coloc-web-a"], "durable": True},
    )
    assert http.get("/v1/esl/colocation-web").status_code == 404


def test_a_gang_over_http_on_the_pure_approach(http: httpx.Client, svc: Service) -> None:
    r = http.post("/v1/esl/gang", json={"name": "g", "members": 3})
    assert r.status_code == 201
    view = r.json()
    assert view["dynamic"] and view["resources"] == [f"{D}/gang-g"]
    assert view["requests"][""]["limits"] == {f"{D}/gang-g": "1", "cpu": "1", "memory": "1Gi"}
    snap = svc.ledger.snapshot()
    assert sum(v.ephemeral.get(f"{D}/gang-g", 0) for v in snap.nodes.values()) == 3


def test_unconfirmed_changes_answer_202() -> None:
    svc = service()
    # As when the write-back could not confirm within its wait: every call is not durable.
    svc.esls = Instances(lambda: LedgerBackend(svc.ledger, D, wait=lambda v, n: False))
    svc.store = MemoryStore(svc.ledger, D, svc.esls, svc.wait_durable, learn=True)
    with client(app_of(svc)) as http:
        r = http.post("/v1/esl/queues", json=QUEUES)  # nothing to write yet: durable
        assert (r.status_code, r.json()["durable"]) == (201, True)
        r = http.post("/v1/esl/queues-jobs/step", json={})
        assert (r.status_code, r.json()["durable"]) == (202, False)
        r = http.post("/v1/esl/sequencing", json=STAGES)
        assert (r.status_code, r.json()["durable"]) == (202, False)
        r = http.post("/v1/esl/sequencing-etl/signal/x")
        assert (r.status_code, r.json()["durable"]) == (202, False)
        r = http.delete("/v1/esl/sequencing-etl")
        assert (r.status_code, r.json()["durable"]) == (202, False)


COMPOSE_BAD_PART = {
    "name": "c",
    "op": "and",
    "pods": 2,
    "parts": [
        {"kind": "antiaffinity", "params": {"name": "a"}},
        {"kind": "colocation", "params": {"name": "g", "groups": {}}},
    ],
}

# (method, path, JSON body or raw bytes, status, field, start of the message)
ERRORS: list[Any] = [
    pytest.param(
        "POST", "/v1/esl/colocation", b'{"name": ', 400, "body", "body is not valid JSON", id="json"
    ),
    pytest.param(
        "POST",
        "/v1/esl/colocation",
        b"[" * 100_000 + b"]" * 100_000,
        400,
        "body",
        "body is nested too deeply",
        id="deep-json",
    ),
    pytest.param(
        "POST",
        "/v1/esl/colocation",
        b'{"name": "\xff"}',
        400,
        "body",
        "body is not valid UTF-8",
        id="utf8",
    ),
    pytest.param("POST", "/v1/esl/nope", {}, 404, "kind", "unknown ESL kind 'nope'", id="kind"),
    pytest.param(
        "POST", "/v1/esl/colocation", {"name": "x", "groups": {}}, 422, "groups", "groups: ", id="p"
    ),
    pytest.param(
        "POST",
        "/v1/esl/compose",
        COMPOSE_BAD_PART,
        422,
        "parts.1.params.groups",
        "parts.1.params.groups: ",
        id="part",
    ),
    pytest.param("POST", "/v1/esl/colocation", b"", 422, None, "Input should be", id="no-body"),
    pytest.param(
        "POST",
        "/v1/esl/antiaffinity",
        {"name": "a", "pods": 9},
        422,
        "pods",
        "9 anti-affine pods need 9 nodes; only 3 match",
        id="unsatisfiable",
    ),
    pytest.param(
        "POST",
        "/v1/esl/colocation",
        {"name": "big", "groups": {"a": 4}, "cpu": "1"},
        409,
        "groups",
        "group a of 4 members (cpu: 1000, pods: 1 each): no node has room for it now",
        id="no-room",
    ),
    pytest.param(
        "POST", "/v1/esl/colocation", {**COLOC, "groups": {"b": 1}}, 409, "name", "ESL", id="exists"
    ),
    pytest.param(
        "POST",
        "/v1/esl/locality",
        {"name": "d", "node": "Not_A_Node"},
        422,
        "node",
        "node name 'Not_A_Node' is not a DNS subdomain",
        id="bad-node-name",
    ),
    pytest.param(
        "POST",
        "/v1/esl/antiaffinity",
        {"name": "a", "node_selector": {"pool": "z"}},
        422,
        "node_selector",
        "node_selector {'pool': 'z'} matches no node",
        id="no-match",
    ),
    pytest.param(
        "POST",
        "/v1/esl/locality",
        {"name": "d", "node": "n1", "slots": 10**20},
        422,
        "slots",
        "slots: ",
        id="huge-count",
    ),
    pytest.param(
        "POST",
        "/v1/esl/locality",
        {"name": "d", "node": "n" * 300},
        422,
        "node",
        "node: ",
        id="long-node",
    ),
    pytest.param(
        "POST",
        "/v1/esl/soft",
        {"name": "s", "alternatives": [{"node": "n1", "node_selector": {"pool": "a"}}]},
        422,
        "alternatives.0",
        "alternatives.0: give at most one of node, node_selector",
        id="two-targets",
    ),
    pytest.param(
        "POST",
        "/v1/esl/antiaffinity",
        {"name": "a", "node_selector": {f"k{i}": "v" for i in range(65)}},
        422,
        "node_selector",
        "node_selector: ",
        id="many-labels",
    ),
    pytest.param("GET", "/v1/esl/nope", None, 404, "id", "no ESL instance 'nope'", id="get"),
    pytest.param("DELETE", "/v1/esl/nope", None, 404, "id", "no ESL instance", id="delete"),
    pytest.param("POST", "/v1/esl/nope/step", None, 404, "id", "no ESL instance", id="step"),
    pytest.param("POST", "/v1/esl/nope/signal/x", None, 404, "id", "no ESL", id="signal"),
    pytest.param(
        "POST",
        "/v1/esl/colocation-web/step",
        None,
        409,
        "id",
        "colocation does not change over time",
        id="static-step",
    ),
    pytest.param(
        "POST", "/v1/esl/queues-jobs/signal/a", None, 409, "id", "queues takes no", id="no-signal"
    ),
    pytest.param(
        "POST", "/v1/esl/sequencing-etl/signal/zz", None, 404, "key", "sequencing etl", id="key"
    ),
    pytest.param(
        "POST",
        "/v1/esl/queues-jobs/step",
        {"backlog": {"zz": 1}},
        404,
        "key",
        "queues jobs has no key 'zz'",
        id="backlog-key",
    ),
    pytest.param(
        "POST",
        "/v1/esl/queues-jobs/step",
        {"backlog": {"a": "x"}},
        422,
        "backlog.a",
        "backlog.a: ",
        id="backlog-type",
    ),
    pytest.param(
        "POST", "/v1/esl/queues-jobs/step", {"later": 1}, 422, "later", "later: ", id="step-extra"
    ),
    pytest.param(
        "POST", "/v1/esl/queues-jobs/step", b"{", 400, "body", "body is not", id="step-json"
    ),
    pytest.param(
        "POST",
        "/v1/esl/sequencing-etl/step",
        {"backlog": {"x": 1}},
        422,
        "backlog",
        "sequencing takes no backlog",
        id="no-backlog",
    ),
    pytest.param("PUT", "/v1/esl/colocation", {}, 405, None, "method PUT is not", id="method"),
    pytest.param(
        "POST",
        "/v1/esl/gang",
        {"name": "t", "members": 2, "required_topology": "shelf"},
        422,
        "required_topology",
        "required_topology: 'shelf' is neither a topology level (zone (",
        id="gang-required-level",
    ),
    pytest.param(
        "POST",
        "/v1/esl/gang",
        {"name": "t", "members": 2, "preferred_topology": "Rack!"},
        422,
        "preferred_topology",
        "preferred_topology: 'Rack!' is neither",
        id="gang-preferred-level",
    ),
    pytest.param(
        "POST",
        "/v1/esl/gang",
        {"name": "t", "members": 2, "required_topology": ""},
        422,
        "required_topology",
        "required_topology: ",
        id="gang-empty-level",
    ),
    pytest.param(
        "POST",
        "/v1/esl/gang",
        {"name": "t", "members": 2, "required_topology": "rack"},
        422,
        "required_topology",
        "gang t: no node has the rack label topology.kubernetes.io/rack",
        id="gang-unlabelled",
    ),
]


@pytest.fixture(scope="module")
def shared() -> Iterator[tuple[Service, httpx.Client]]:
    """One served app for the refusals, which change nothing: three instances, and each
    node with 3 of its 4 cores free once web's group has its place."""
    svc = service()
    svc.esls.create("colocation", COLOC)
    svc.esls.create("queues", QUEUES)
    svc.esls.create("sequencing", STAGES)
    svc.esls.step("queues-jobs")  # steady now: the service's own steps change nothing
    for n in ("n1", "n2", "n3"):
        svc.ledger.observe_bound(f"busy-{n}", n, {"cpu": 1000, "pods": 1})
    with client(app_of(svc)) as http:
        yield svc, http


@pytest.mark.parametrize(("method", "path", "body", "status", "field", "message"), ERRORS)
def test_every_refusal_names_its_status_and_field(
    shared: tuple[Service, httpx.Client],
    method: str,
    path: str,
    body: Any,
    status: int,
    field: str | None,
    message: str,
) -> None:
    svc, http = shared
    before = svc.ledger.snapshot()
    if isinstance(body, bytes):
        r = http.request(method, path, content=body, headers={"content-type": JSON})
    else:
        r = http.request(method, path, json=body)
    assert r.status_code == status, r.text
    reply = r.json()
    assert set(reply) <= {"error", "field"} and reply.get("field") == field
    assert reply["error"].startswith(message), reply["error"]
    after = svc.ledger.snapshot()
    assert [i.id for i in svc.esls.all()] == ["colocation-web", "queues-jobs", "sequencing-etl"]
    assert (after.nodes, after.holdings) == (before.nodes, before.holdings)  # nothing changed


def test_the_standalone_service_learns_the_node_an_esl_names(
    http: httpx.Client, svc: Service
) -> None:
    r = http.post("/v1/esl/locality", json={"name": "d", "node": "n9"})
    assert r.status_code == 201 and r.json()["resources"] == [f"{D}/data-d"]
    view = svc.ledger.node("n9")
    assert view is not None and view.ephemeral == {f"{D}/data-d": 100_000}


def test_no_token_is_401(svc: Service) -> None:
    with client(app_of(svc), token=None) as http:
        r = http.post("/v1/esl/colocation", json=COLOC)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert len(svc.esls) == 0


def test_more_instances_than_the_limit_is_429() -> None:
    svc = service(max_esl_instances=2)
    with client(app_of(svc)) as http:
        assert http.post("/v1/esl/colocation", json=COLOC).status_code == 201
        assert http.post("/v1/esl/queues", json=QUEUES).status_code == 201
        r = http.post("/v1/esl/sequencing", json=STAGES)
        assert (r.status_code, r.json()) == (
            429,
            {"error": "the service runs 2 ESL instances, its limit", "field": "kind"},
        )
        assert http.delete("/v1/esl/queues-jobs").status_code == 200
        assert http.post("/v1/esl/sequencing", json=STAGES).status_code == 201


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                yield v
            else:
                yield from refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from refs(v)


def test_the_esl_routes_openapi_has_every_kind_and_no_dangling_ref(http: httpx.Client) -> None:
    doc = http.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    create = doc["paths"]["/v1/esl/{iid}"]["post"]  # one template: POST names the kind there
    kinds = create["requestBody"]["content"]["application/json"]["schema"]["oneOf"]
    assert sorted(k["$ref"].rsplit("/", 1)[1] for k in kinds) == sorted(
        cls.Params.__name__ for cls in REGISTRY.values()
    )
    # Every schema the ESL routes reach, followed through the components, exists.
    todo = [r for p, item in doc["paths"].items() if p.startswith("/v1/esl") for r in refs(item)]
    seen: set[str] = set()
    while todo:
        ref = todo.pop()
        if ref in seen:
            continue
        seen.add(ref)
        assert ref.startswith("#/components/schemas/"), ref
        name = ref.removeprefix("#/components/schemas/")
        assert name in schemas, f"dangling {ref}"
        todo.extend(refs(schemas[name]))
    assert {"#/components/schemas/ComposeParams", "#/components/schemas/Part"} <= seen
    assert schemas["GangParams"]["properties"]["members"]["maximum"] == 10_000
