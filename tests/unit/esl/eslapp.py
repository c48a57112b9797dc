"""The extender's app in standalone mode for the ESL unit tests, served in-process.

`service()` builds the real Service (no Kubernetes API, bind off: the ESLs run the pure
approach's branch unless told otherwise) with a few nodes in its ledger, as the cluster view
would have them. `served(app)` enters the app's lifespan (the service starts and stops with
it) on an event loop that an anyio blocking portal runs in a thread, and gives a synchronous
httpx transport that hands each request to httpx's ASGITransport on that loop: the
PolicyClient and plain httpx.Clients reach the app with no socket and no process. Imported by
the tests of this directory (pytest's prepend mode puts it on the path).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx
from anyio.from_thread import BlockingPortal, start_blocking_portal
from fastapi import FastAPI

from extender.service import Service
from extender.settings import Settings

TOKEN = "t"
BASE = "http://extender"
NODES: Mapping[str, Mapping[str, str]] = {
    "n1": {"pool": "a"},
    "n2": {"pool": "a"},
    "n3": {"pool": "b"},
}
PHYSICAL = {"cpu": 4000, "memory": 8 << 30, "pods": 110}


def service(nodes: Mapping[str, Mapping[str, str]] = NODES, **settings: Any) -> Service:
    svc = Service(Settings(mode="standalone", token=TOKEN, **settings))
    for n, labels in nodes.items():
        svc.ledger.upsert_node(n, labels, PHYSICAL)
    return svc


class PortalTransport(httpx.BaseTransport):
    """A synchronous transport over httpx's ASGITransport, run on the portal's loop."""

    def __init__(self, app: FastAPI, portal: BlockingPortal) -> None:
        self._asgi = httpx.ASGITransport(app=app)
        self._portal = portal

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._portal.call(self._send, request)

    async def _send(self, request: httpx.Request) -> httpx.Response:
        response = await self._asgi.handle_async_request(request)
        content = await response.aread()
        return httpx.Response(response.status_code, headers=response.headers, content=content)


@contextmanager
def served(app: FastAPI) -> Iterator[PortalTransport]:
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(app.router.lifespan_context(app)),
    ):
        yield PortalTransport(app, portal)


@contextmanager
def client(app: FastAPI, token: str | None = TOKEN) -> Iterator[httpx.Client]:
    """An httpx.Client of the served app, with the bearer token unless None."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with (
        served(app) as transport,
        httpx.Client(transport=transport, base_url=BASE, headers=headers) as http,
    ):
        yield http
