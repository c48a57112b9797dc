"""Binder against a fake API server at the HTTP boundary (the real client builds requests)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest
import urllib3
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.rest import RESTResponse

from extender.adapters.binder import Binder, BindError

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web-0", "namespace": "shop", "uid": "u-1"},
    "spec": {"containers": [{"name": "c", "resources": {"limits": {"escher.io/g": "1"}}}]},
}
# What the API server answers to a binding: a Status, which the python client's models
# cannot turn into the V1Binding its generated method declares.
SUCCESS = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


class FakeResponse:
    def __init__(self, status: int, obj: Any) -> None:
        self.status = status
        self.reason = "OK" if status < 300 else "Error"
        self.headers = {"content-type": "application/json"}
        self.data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.drained = self.released = False

    def drain_conn(self) -> None:
        self.drained = True

    def release_conn(self) -> None:
        self.released = True


class FakeServer:
    def __init__(self, reply: Callable[[str, str, Any], FakeResponse | Exception]) -> None:
        self.reply = reply
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.responses: list[FakeResponse] = []

    def request(
        self,
        method: str,
        url: str,
        headers: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> RESTResponse:
        path = urlsplit(url).path
        self.requests.append((method, path, dict(headers or {}), body))
        out = self.reply(method, path, body)
        if isinstance(out, Exception):
            raise out
        self.responses.append(out)
        return RESTResponse(out)


def binder(reply: Callable[[str, str, Any], FakeResponse | Exception]) -> tuple[Binder, FakeServer]:
    server = FakeServer(reply)
    api = ApiClient(Configuration(host="http://apiserver.invalid"))
    api.rest_client = server
    return Binder(api), server


def status(code: int, message: str) -> FakeResponse:
    return FakeResponse(
        code, {"kind": "Status", "status": "Failure", "code": code, "message": message}
    )


def test_get_pod_returns_the_pod_as_plain_json() -> None:
    b, server = binder(lambda m, p, body: FakeResponse(200, POD))
    assert b.get_pod("shop", "web-0") == POD
    assert server.requests[0][:2] == ("GET", "/api/v1/namespaces/shop/pods/web-0")
    assert server.responses[0].released


def test_bind_creates_the_binding_subresource_with_the_uid_precondition() -> None:
    b, server = binder(lambda m, p, body: FakeResponse(201, SUCCESS))
    b.bind("shop", "web-0", "u-1", "node-7")
    ((method, path, _, body),) = server.requests
    assert (method, path) == ("POST", "/api/v1/namespaces/shop/pods/web-0/binding")
    assert body == {
        "metadata": {"name": "web-0", "namespace": "shop", "uid": "u-1"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-7"},
    }
    assert server.responses[0].drained and server.responses[0].released


ERRORS = [
    ("gone", status(404, 'pods "web-0" not found'), "pod_gone", 404, 'pods "web-0" not found'),
    (
        "already-bound",
        status(409, 'pod web-0 is already assigned to node "n1"'),
        "conflict",
        409,
        'already assigned to node "n1"',
    ),
    (
        "other-uid",
        status(409, "Precondition failed: UID in precondition: u-1"),
        "conflict",
        409,
        "Precondition failed",
    ),
    (
        "forbidden",
        status(403, "cannot create pods/binding"),
        "refused",
        403,
        "HTTP 403: cannot create pods/binding",
    ),
    ("server", FakeResponse(503, b"<html>busy</html>"), "refused", 503, "HTTP 503: Error"),
    (
        "unreachable",
        urllib3.exceptions.MaxRetryError(None, "/x", reason="connection refused"),
        "unreachable",
        None,
        "unreachable",
    ),
    ("reset", ConnectionResetError("reset by peer"), "unreachable", None, "reset by peer"),
]


@pytest.mark.parametrize(
    ("reply", "reason", "code", "text"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS]
)
@pytest.mark.parametrize("call", ["get_pod", "bind"])
def test_failures_are_typed_and_readable(
    call: str, reply: FakeResponse | Exception, reason: str, code: int | None, text: str
) -> None:
    b, _ = binder(lambda m, p, body: reply)
    with pytest.raises(BindError) as info:
        if call == "get_pod":
            b.get_pod("shop", "web-0")
        else:
            b.bind("shop", "web-0", "u-1", "node-7")
    err = info.value
    assert (err.reason, err.status) == (reason, code)
    assert "shop/web-0" in str(err) and text in str(err)


@pytest.mark.parametrize("data", [b"[1, 2]", b"not json"])
def test_get_pod_refuses_a_reply_that_is_not_an_object(data: bytes) -> None:
    b, _ = binder(lambda m, p, body: FakeResponse(200, data))
    with pytest.raises(BindError) as info:
        b.get_pod("shop", "web-0")
    assert info.value.reason == "refused"
