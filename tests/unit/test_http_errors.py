"""One rendering of errors (extender.http.errors.render) serves the routes and the verbs'
endpoint alike: the table's status and body, a client's error (4xx) counted, a defect logged
with its traceback and answered 500 without it, NotReady's 503 neither logged nor counted."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from extender.core import errors as core
from extender.http import errors
from extender.http.errors import NotReady
from extender.http.verbs import VerbEndpoints
from extender.metrics import Metrics
from extender.wire import BadRequest

Reply = tuple[int, dict[str, Any], list[int]]  # status, body, statuses counted


def from_a_route(e: Exception) -> Reply:
    app = FastAPI()
    counted: list[int] = []
    errors.install(app, lambda _, status: counted.append(status))

    @app.post("/raise")
    async def fail() -> None:
        raise e

    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.post("/raise")
    return r.status_code, r.json(), counted


class Failing:
    """Verbs whose filter raises."""

    def __init__(self, e: Exception) -> None:
        self.e = e

    def filter(self, _: object) -> None:
        raise self.e


def from_the_verbs(e: Exception) -> Reply:
    metrics = Metrics()
    endpoints = VerbEndpoints(Failing(e), metrics, lambda: (True, "ok"))  # type: ignore[arg-type]
    body = b'{"Pod": {"metadata": {"uid": "u"}}, "NodeNames": []}'
    r = TestClient(endpoints).post("/filter", content=body)  # no lifespan: a bare endpoint
    counted = [
        int(s.labels["status"])
        for m in metrics.client_errors.collect()
        for s in m.samples
        if s.name.endswith("_total") and s.value
    ]
    return r.status_code, r.json(), counted


@pytest.mark.parametrize("serve", [from_a_route, from_the_verbs], ids=["route", "verbs"])
@pytest.mark.parametrize(
    ("error", "status", "body"),
    [
        (BadRequest("Pod: bad", "Pod"), 400, {"error": "Pod: bad", "field": "Pod"}),
        (core.NotFound("no such resource"), 404, {"error": "no such resource"}),
        (NotReady("not ready: building"), 503, {"error": "not ready: building"}),
        (RuntimeError("a secret"), 500, {"error": "internal error (logged)"}),
    ],
    ids=["bad-request", "not-found", "not-ready", "defect"],
)
def test_every_error_is_answered_alike_by_the_routes_and_the_verbs(
    serve: Any, error: Exception, status: int, body: dict[str, Any], caplog: Any
) -> None:
    with caplog.at_level(logging.ERROR, logger=errors.__name__):
        got = serve(error)
    assert got == (status, body, [status] if status < 500 else [])
    logged = [r for r in caplog.records if r.getMessage() == "internal error"]
    assert len(logged) == (status == 500)
    assert all(r.exc_info and r.exc_info[1] is error for r in logged)
