"""The typed policy client against the real app (standalone mode) over an in-process
transport: request bodies, reply parsing and error mapping."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from extender.app import create_app
from extender.esl.client import PolicyAPIError, PolicyClient
from extender.settings import Settings


@pytest.fixture
def client() -> Iterator[PolicyClient]:
    app = create_app(Settings(kube=False, token="t"))
    with TestClient(app) as tc:
        pc = PolicyClient("http://testserver", token="t")
        pc._http = tc  # the TestClient is an httpx.Client bound to the app
        tc.headers["Authorization"] = "Bearer t"
        yield pc


def test_round_trip(client: PolicyClient) -> None:
    r = client.set_resource("gang-a", 3, node="n1")
    assert (r.resource, r.nodes, r.durable) == ("escher.io/gang-a", {"n1": 3}, True)
    client.set_resource("gang-a", 1, node="n2")
    assert client.get_resource("gang-a").nodes["n1"].available == 3
    state = client.cluster_state()
    assert state.nodes["n2"]["escher.io/gang-a"].capacity == 1
    assert client.delete_resource("gang-a").removed_from == ["n1", "n2"]


@pytest.mark.parametrize(
    ("call", "status", "field"),
    [
        (lambda c: c.get_resource("absent"), 404, "name"),
        (lambda c: c.set_resource("bad!", 1), 422, "name"),
        (lambda c: c.set_resource("x", 1, node_selector={"a": "b"}), 422, "node_selector"),
    ],
)
def test_errors_carry_status_and_field(client: PolicyClient, call, status, field) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(PolicyAPIError) as e:
        call(client)
    assert (e.value.status, e.value.field) == (status, field)


def test_client_refuses_bad_spec_before_sending() -> None:
    with pytest.raises(ValueError, match="capacity"):
        PolicyClient("http://127.0.0.1:9").set_resource("x", -1)
