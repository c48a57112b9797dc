"""Bodies that cannot be decoded, sent to every operation that reads a body.

The bodies are test data (tests/fuzz/data/undecodable/): bytes that are not UTF-8 (a bad
start byte, an overlong encoding, a truncated sequence, surrogates and code points above
U+10FFFF written as bytes, Latin-1 and UTF-16 text, NUL bytes), in strings, in keys, in
node names, node lists and victims, and a lone surrogate written as a JSON escape. JSON text
must be UTF-8 (RFC 8259), and both decoders the service uses (msgspec for the verbs and the
ESL bodies, FastAPI's for the policy routes) find such bytes only when they reach them.

What must hold for each body and operation: a 4xx whose reply names the offending field
(`body`, or the field the bytes are in), never a 5xx; and afterwards nothing has changed
(the cluster state and the ESL instances are as before). In process, through ASGI, in
standalone mode: the same code that decodes behind both listeners.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from extender.app import create_app
from extender.esl import registry
from extender.settings import Settings

DATA = Path(__file__).parent / "data" / "undecodable"
BODIES = sorted(DATA.iterdir())
TOKEN = "t"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    app = create_app(Settings(mode="standalone", token=TOKEN))
    # The service steps dynamic ESLs every second, and each step counts in their `steps`,
    # which the state compared must not change but by a request (a loaded machine took over
    # a second between the two looks once). Its step loop waits an hour here.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(registry, "STEP_SECONDS", 3600.0)
        with TestClient(app, raise_server_exceptions=False) as c:
            # Standalone: nodes are learnt from the verbs' requests.
            nodes = {"Pod": {"metadata": {"name": "p", "uid": "u"}}, "NodeNames": ["n1", "n2"]}
            assert c.post("/filter", json=nodes).status_code == 200
            put = c.put("/v1/resources/x", json={"capacity": 2}, headers=AUTH)
            assert put.status_code == 200, put.text
            esl = c.post(
                "/v1/esl/loadbalance", json={"name": "lb", "mode": "dynamic"}, headers=AUTH
            )
            assert esl.status_code == 201, esl.text
            yield c


def _state(c: TestClient) -> tuple[Any, Any]:
    return (
        c.get("/v1/cluster-state", headers=AUTH).json(),
        [(i["id"], i["steps"], i["resources"]) for i in c.get("/v1/esl", headers=AUTH).json()],
    )


def _operations(c: TestClient) -> list[tuple[str, str]]:
    iid = c.get("/v1/esl", headers=AUTH).json()[0]["id"]
    return [
        ("POST", "/filter"),
        ("POST", "/prioritize"),
        ("POST", "/bind"),
        ("POST", "/preempt"),
        ("PUT", "/v1/resources/x"),
        ("PUT", "/v1/resources/hostile"),
        ("POST", "/v1/esl/loadbalance"),
        ("POST", f"/v1/esl/{iid}/step"),
    ]


@pytest.mark.parametrize("path", BODIES, ids=[p.name for p in BODIES])
def test_an_undecodable_body_is_a_4xx_naming_the_field_and_changes_nothing(
    client: TestClient, path: Path, tally: Counter[str]
) -> None:
    raw = path.read_bytes()
    before = _state(client)
    for method, route in _operations(client):
        r = client.request(method, route, content=raw, headers=AUTH)
        tally["undecodable: requests"] += 1
        where = f"{method} {route} with {path.name}: {r.status_code} {r.text[:200]}"
        assert 400 <= r.status_code < 500, where
        reply = r.json()
        assert reply.get("field"), where
        assert reply["field"].split(".")[0].split("[")[0] in reply["error"], where
        if not _is_utf8(raw):  # bytes that are not text at all: the body is malformed
            assert r.status_code == 400, where
    assert _state(client) == before


def test_the_data_holds_what_it_claims() -> None:
    # A body that decoded fine would make the test above prove nothing.
    text = {p.name for p in BODIES if _is_utf8(p.read_bytes())}
    assert text == {
        "lone-surrogate-escape.json",
        "lone-surrogate-escape-in-parameters.json",
        "nul-bytes.json",
    }
    assert len(BODIES) - len(text) >= 10
