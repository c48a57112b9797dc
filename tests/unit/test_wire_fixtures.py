"""The extender answers the exact JSON the real kube-scheduler v1.37 sent (recorded by
tests/e2e/test_extender_wire_recording.py) in the shapes kube-scheduler accepts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from extender.app import create_app
from extender.settings import Settings

FIXTURES = Path(__file__).parents[1] / "fixtures" / "kube-scheduler-v1.37"


def recorded(name: str, gpu: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    if gpu:
        body["Pod"]["spec"]["containers"][0]["resources"]["limits"] = {"escher.io/gpu": gpu}
    return body


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(mode="standalone"))) as c:
        assert c.put("/v1/resources/gpu", json={"capacity": 2, "node": "node-2"}).is_success
        yield c


def test_recordings_have_the_capitalised_keys() -> None:
    for name in ("filter-nodenames", "filter-nodelist", "prioritize-nodenames"):
        assert set(recorded(name)) == {"Pod", "Nodes", "NodeNames"}


@pytest.mark.parametrize("gpu", [None, "1"])
def test_filter_with_node_names(client: TestClient, gpu: str | None) -> None:
    body = recorded("filter-nodenames", gpu)
    r = client.post("/filter", json=body)
    assert r.status_code == 200
    out = r.json()
    assert out["Error"] == ""
    assert (
        out.get("Nodes") is None
    )  # null, as Go writes a nil pointer  # NodeNames mode: kube-scheduler reads NodeNames
    if gpu is None:  # no ephemeral request: every node passes, order kept
        assert out["NodeNames"] == body["NodeNames"]
    else:
        assert out["NodeNames"] == ["node-2"]
        assert set(out["FailedAndUnresolvableNodes"]) == {"node-0", "node-1"}
    assert set(out["NodeNames"]) <= set(body["NodeNames"])


@pytest.mark.parametrize("gpu", [None, "1"])
def test_filter_with_node_list_returns_the_node_objects(
    client: TestClient, gpu: str | None
) -> None:
    body = recorded("filter-nodelist", gpu)
    out = client.post("/filter", json=body).json()
    assert out.get("NodeNames") is None  # NodeList mode: Nodes must carry the answer
    sent = {n["metadata"]["name"]: n for n in body["Nodes"]["items"]}
    got = {n["metadata"]["name"]: n for n in out["Nodes"]["items"]}
    want = set(sent) if gpu is None else {"node-2"} & set(sent)
    assert set(got) == want
    for name, node in got.items():
        assert node == sent[name]  # echoed unchanged: kube-scheduler rebuilds NodeInfo from it


def test_prioritize_is_a_bare_list_of_host_scores(client: TestClient) -> None:
    body = recorded("prioritize-nodenames", "1")
    out = client.post("/prioritize", json=body).json()
    # Only node-2 has the resource (1 of 2 left after the pod: 5); nodes scoring 0 are left
    # out, which kube-scheduler, adding the scores up, reads the same as 0.
    assert out == [{"Host": "node-2", "Score": 5}]
    assert "node-2" in body["NodeNames"]
