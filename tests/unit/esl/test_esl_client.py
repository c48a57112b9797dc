"""The typed policy client (extender.esl.client.PolicyClient) against the real app in
standalone mode, served in-process (eslapp): request bodies, reply parsing, and errors that
carry the status and the field the service named."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from eslapp import BASE, TOKEN, served, service

from extender.app import create_app
from extender.esl.client import PolicyAPIError, PolicyClient
from extender.policies.api import ResourceSpec
from extender.service import Service


@pytest.fixture
def svc() -> Service:
    return service(nodes={})  # standalone: nodes are learnt from what is set on them


@pytest.fixture
def client(svc: Service) -> Iterator[PolicyClient]:
    with (
        served(create_app(svc.settings, svc)) as transport,
        PolicyClient(BASE, token=TOKEN, transport=transport) as pc,
    ):
        yield pc


def test_round_trip(client: PolicyClient) -> None:
    r = client.set_resource("gang-a", 3, node="n1")
    assert (r.resource, r.nodes, r.durable) == ("escher.io/gang-a", {"n1": 3}, True)
    client.set_resource("gang-a", 1, node="n2")
    assert client.get_resource("gang-a").nodes["n1"].available == 3
    state = client.cluster_state()
    assert state.nodes["n2"]["escher.io/gang-a"].capacity == 1
    r = client.put_resource("gang-a", ResourceSpec(capacity=2, node_selector={}))
    assert r.nodes == {"n1": 2, "n2": 2}  # an empty selector matches every node
    removed = client.delete_resource("gang-a")
    assert (removed.removed_from, removed.durable) == (["n1", "n2"], True)


@pytest.mark.parametrize(
    ("call", "status", "field"),
    [
        pytest.param(lambda c: c.get_resource("absent"), 404, "name", id="absent"),
        pytest.param(lambda c: c.delete_resource("absent"), 404, "name", id="delete-absent"),
        pytest.param(lambda c: c.set_resource("bad!", 1), 422, "name", id="bad-name"),
        pytest.param(
            lambda c: c.set_resource("x", 1, node_selector={"a": "b"}),
            422,
            "node_selector",
            id="selector-matches-nothing",
        ),
        pytest.param(lambda c: c.set_resource("x", 0, node="n9"), 404, "node", id="unknown"),
    ],
)
def test_errors_carry_status_and_field(
    client: PolicyClient, call: Callable[[PolicyClient], Any], status: int, field: str
) -> None:
    with pytest.raises(PolicyAPIError) as e:
        call(client)
    assert (e.value.status, e.value.field) == (status, field)
    assert str(e.value).startswith(f"{status}: ")


def test_a_held_resource_is_deleted_only_when_forced(client: PolicyClient, svc: Service) -> None:
    client.set_resource("r", 1, node="n1")
    svc.ledger.observe_bound("pod", "n1", {"escher.io/r": 1})  # as the cluster view would
    with pytest.raises(PolicyAPIError) as e:
        client.delete_resource("r")
    assert (e.value.status, e.value.field) == (409, "name")
    assert client.delete_resource("r", force=True).removed_from == ["n1"]


def test_the_client_refuses_a_bad_spec_before_sending() -> None:
    with pytest.raises(ValueError, match="capacity"):
        PolicyClient("http://127.0.0.1:9").set_resource("x", -1)


@pytest.mark.parametrize("token", [None, "wrong"], ids=["none", "wrong"])
def test_the_token_is_required(svc: Service, token: str | None) -> None:
    with (
        served(create_app(svc.settings, svc)) as transport,
        PolicyClient(BASE, token=token, transport=transport) as pc,
        pytest.raises(PolicyAPIError) as e,
    ):
        pc.cluster_state()
    assert e.value.status == 401
