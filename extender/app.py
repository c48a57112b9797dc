"""The FastAPI application: the routers of extender.http, assembled around one Service.

`create_app(settings, service)` mounts one router per area (policy, gangs, ESLs,
operations) over the service (a new one when none is given), puts the edge in front (which
serves kube-scheduler's verbs itself: they are the hot path) and the one error table, and
completes the OpenAPI document with the verbs and the schemas of the msgspec wire types and of
every ESL's parameters (so no `$ref` dangles). Every listener serves this one app: uvicorn's,
and the verbs' HTTP/2 listener (extender.http.verbs_listener). Called by extender.server
(`serve`, which starts and stops the service itself: lifecycle=False) and by tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from starlette.types import ASGIApp, Receive, Scope, Send

from extender import __version__
from extender.http import errors, esl, gangs, ops, policy, verbs
from extender.http.edge import Edge
from extender.http.verbs import VerbEndpoints
from extender.service import Service
from extender.settings import Settings


class ExtenderApp(FastAPI):
    """FastAPI behind the edge (extender.http.edge): every request meets the edge's limits
    first, and kube-scheduler's verbs are answered there, before FastAPI's own per-request
    work (telemetry, middleware, routing) on the hot path."""

    edge: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.edge is None or scope["type"] != "http":
            await super().__call__(scope, receive, send)
        else:
            await self.edge(scope, receive, send)

    async def behind_edge(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Everything but the verbs, as FastAPI serves it: the edge's inner app."""
        await super().__call__(scope, receive, send)


def create_app(
    settings: Settings, service: Service | None = None, *, lifecycle: bool = True
) -> FastAPI:
    """The app serving `service` (a new one by default). With `lifecycle`, the app's
    lifespan starts and stops the service; without, the caller does (extender.server)."""
    svc = service or Service(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if not lifecycle:
            yield
            return
        await svc.start()
        try:
            yield
        finally:
            await svc.stop()

    app = ExtenderApp(
        title="escher-extender",
        version=__version__,
        summary="A kube-scheduler extender over a ledger of ESCHER ephemeral resources.",
        lifespan=lifespan,
    )
    app.state.runtime = svc
    for router in (policy, gangs, esl, ops):
        app.include_router(router.router(svc))
    app.edge = Edge(
        app.behind_edge,
        max_body_bytes=settings.listen.max_body_bytes,
        body_timeout=settings.listen.body_timeout_seconds,
        verbs=VerbEndpoints(svc.verbs, svc.metrics, svc.ready),
        verbs_ports=frozenset(
            p
            for p in (settings.listen.verbs_port, settings.listen.verbs_http1_port)
            if p is not None
        ),
    )
    client_errors = svc.metrics.client_errors

    def count(request: Request, status: int) -> None:
        route = request.scope.get("route")
        client_errors.labels(getattr(route, "path", "unmatched"), str(status)).inc()

    errors.install(app, count)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema is None:
        doc = get_openapi(
            title=app.title, version=app.version, summary=app.summary, routes=app.routes
        )
        doc["paths"] = {**verbs.openapi_paths(), **doc["paths"]}
        edge = {str(status): errors.openapi_reply(status) for status in errors.EDGE_STATUSES}
        for item in doc["paths"].values():
            for operation in item.values():
                operation["responses"] = {**operation["responses"], **edge}
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        _, wire = msgspec.json.schema_components(
            verbs.WIRE_TYPES, ref_template="#/components/schemas/{name}"
        )
        schemas.update(wire)
        schemas.update(esl.esl_components())
        app.openapi_schema = doc
    return app.openapi_schema
