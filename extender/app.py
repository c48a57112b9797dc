"""The HTTP surface: kube-scheduler's extender verbs, the policy API, health and metrics.

Routes are thin: they validate the wire types, call extender.verbs / extender.policy, and
turn typed errors into clear 4xx replies. Created by extender.cli (`escher-extender serve`)
and by tests with `create_app(settings)`.

Error contract: malformed JSON is 400, a wrong type or missing field 422, both naming the
field; an unknown path 404; a body over settings.max_body_bytes 413; a missing or wrong policy
token 401; a policy call before the ledger is rebuilt 503. A well-formed filter call that
cannot be satisfied is a 200 whose per-node reasons explain. Never a 5xx for input.
"""

import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, TypeVar

from fastapi import Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ValidationError
from pydantic_core import to_json
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from extender import __version__, policy
from extender.esl import routes as esl_routes
from extender.esl.base import ESLError
from extender.policy import (
    ClusterState,
    DeleteResourceResult,
    PolicyError,
    ResourceSpec,
    ResourceState,
    SetResourceResult,
)
from extender.resources import InvalidResource, full_name
from extender.service import Service
from extender.settings import Settings
from extender.verbs import BadRequest
from extender.wire import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    HostPriority,
)

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)
_JSON = "application/json"


class ApiError(Exception):
    """An HTTP error reply: {"error": message, "field": field}."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        self.status = status
        self.field = field
        super().__init__(message)


def _describe(e: ValidationError) -> tuple[int, str, str | None]:
    """The status, a one-line message and the field of the first validation error."""
    err = e.errors(include_url=False)[0]
    if err["type"] == "json_invalid":
        return 400, f"body is not valid JSON: {err.get('ctx', {}).get('error', err['msg'])}", None
    loc = ".".join(str(p) for p in err["loc"]) or "body"
    return 422, f"{loc}: {err['msg']}", loc


async def _parse(request: Request, model: type[M]) -> M:
    # model_validate_json parses and validates in one pass (pydantic-core): the hot path.
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as e:
        status, message, field = _describe(e)
        raise ApiError(status, message, field) from e


def _json(model: BaseModel) -> Response:
    return Response(model.model_dump_json(exclude_none=True), media_type=_JSON)


class EdgeGuard:
    """Two fixes at the edge, before routing.

    Folds `//` in paths into `/`: a verb configured with a leading slash makes kube-scheduler
    call `<urlPrefix>//filter`. Refuses bodies over `limit` bytes with 413, by Content-Length
    before reading and by counting while reading (chunked bodies).
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if "//" in scope["path"]:
            scope = dict(scope)
            while "//" in scope["path"]:
                scope["path"] = scope["path"].replace("//", "/")
        too_large = f"request body is larger than {self.limit} bytes"
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            await JSONResponse({"error": too_large}, 413)(scope, receive, send)
            return
        seen = 0

        async def counting() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise ApiError(413, too_large)  # raised inside the route: handled below
            return message

        await self.app(scope, counting, send)


def create_app(settings: Settings, service: Service | None = None) -> FastAPI:
    svc = service or Service(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        svc.start()
        yield
        svc.stop()

    app = FastAPI(
        title="escher-extender",
        version=__version__,
        summary="A kube-scheduler extender over a ledger of ESCHER ephemeral resources.",
        lifespan=lifespan,
    )
    app.state.service = svc
    app.add_middleware(EdgeGuard, limit=settings.max_body_bytes)
    m = svc.metrics

    # ---- errors -------------------------------------------------------------------------

    def _error(request: Request, status: int, message: str, field: str | None) -> Response:
        if status < 500:
            m.bad_requests.labels(request.url.path).inc()
        body: dict[str, Any] = {"error": message}
        if field:
            body["field"] = field
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return JSONResponse(body, status_code=status, headers=headers)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, e: ApiError) -> Response:
        return _error(request, e.status, str(e), e.field)

    @app.exception_handler(ESLError)
    async def _esl_error(request: Request, e: ESLError) -> Response:
        return _error(request, e.status, str(e), e.field)

    @app.exception_handler(BadRequest)
    async def _bad_request(request: Request, e: BadRequest) -> Response:
        return _error(request, 400, str(e), None)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, e: RequestValidationError) -> Response:
        err = e.errors()[0]
        if err["type"] == "json_invalid":
            return _error(request, 400, "body is not valid JSON", None)
        loc = ".".join(str(p) for p in err["loc"])
        return _error(request, 422, f"{loc}: {err['msg']}", loc)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException) -> Response:
        if e.status_code == 404:
            msg = f"no such path: {request.method} {request.url.path}"
        elif e.status_code == 405:
            msg = f"method {request.method} is not allowed on {request.url.path}"
        else:
            msg = str(e.detail)
        return _error(request, e.status_code, msg, None)

    # ---- extender verbs -------------------------------------------------------------------

    def timed(verb: str) -> Callable[[Callable[..., Awaitable[Response]]], Any]:
        hist = m.request_seconds.labels(verb)

        def wrap(fn: Callable[..., Awaitable[Response]]) -> Callable[..., Awaitable[Response]]:
            async def inner(request: Request) -> Response:
                start = time.perf_counter()
                try:
                    response = await fn(request)
                finally:
                    elapsed = time.perf_counter() - start
                    hist.observe(elapsed)
                # Server-Timing: the benchmarks read server-side latency from it exactly
                # (parse + decide + serialise), apart from the network and the client.
                response.headers["Server-Timing"] = f"app;dur={elapsed * 1000:.4f}"
                return response

            inner.__name__ = fn.__name__
            inner.__doc__ = fn.__doc__
            return inner

        return wrap

    def body_schema(model: type[BaseModel]) -> dict[str, Any]:
        return {
            "requestBody": {
                "required": True,
                "content": {_JSON: {"schema": model.model_json_schema()}},
            }
        }

    @app.post(
        "/filter",
        tags=["extender"],
        response_model=ExtenderFilterResult,
        openapi_extra=body_schema(ExtenderArgs),
    )
    @timed("filter")
    async def filter_(request: Request) -> Response:
        """kube-scheduler's filter call: which of the nodes can take the pod."""
        result = svc.verbs.filter(await _parse(request, ExtenderArgs))
        passed = len(result.NodeNames or (result.Nodes.items if result.Nodes else []))
        m.decisions.labels("filter", "passed").inc(passed)
        failed = len(result.FailedNodes) + len(result.FailedAndUnresolvableNodes)
        if failed:
            m.decisions.labels("filter", "rejected").inc(failed)
        return _json(result)

    @app.post(
        "/prioritize",
        tags=["extender"],
        response_model=list[HostPriority],
        openapi_extra=body_schema(ExtenderArgs),
    )
    @timed("prioritize")
    async def prioritize(request: Request) -> Response:
        """kube-scheduler's prioritize call: a score 0..10 per node, as a bare list."""
        scores = svc.verbs.prioritize(await _parse(request, ExtenderArgs))
        m.decisions.labels("prioritize", "scored").inc(len(scores))
        body = to_json([{"Host": node, "Score": score} for node, score in scores.items()])
        return Response(body, media_type=_JSON)

    @app.post(
        "/bind",
        tags=["extender"],
        response_model=ExtenderBindingResult,
        openapi_extra=body_schema(ExtenderBindingArgs),
    )
    @timed("bind")
    async def bind(request: Request) -> Response:
        """kube-scheduler's bind call: hold the pod's place in the ledger, then bind it."""
        args = await _parse(request, ExtenderBindingArgs)
        result = await svc.verbs.bind(args)
        m.decisions.labels("bind", "bound" if not result.Error else "refused").inc()
        if result.Error:
            log.info(
                "bind refused",
                extra={"pod": args.PodName, "node": args.Node, "reason": result.Error},
            )
        return _json(result)

    # ---- policy API -------------------------------------------------------------------------

    bearer = HTTPBearer(auto_error=False)

    def authorized(
        creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> None:
        if settings.token is None:
            return
        if creds is None or not secrets.compare_digest(creds.credentials, settings.token):
            raise ApiError(401, "missing or wrong bearer token")

    def ready() -> None:
        ok, why = svc.ready()
        if not ok:
            raise ApiError(503, f"not ready: {why}")

    policy_deps = [Depends(authorized), Depends(ready)]

    @app.put("/v1/resources/{name}", tags=["policy"], dependencies=policy_deps)
    def set_resource(name: str, spec: ResourceSpec, response: Response) -> SetResourceResult:
        """ESCHER's set_resource: create, resize or (capacity 0) remove an ephemeral resource.

        Answers 200 once the change is on the Node objects, 202 if it is applied to the
        ledger but the write-back has not confirmed it within the wait (it keeps retrying).
        """
        start = time.perf_counter()
        try:
            full, capacity, version = policy.set_resource(
                svc.ledger, settings.resource_domain, name, spec, learn=not settings.kube
            )
        except PolicyError as e:
            raise ApiError(e.status, str(e), e.field) from e
        durable = _wait_durable(version, capacity)
        response.status_code = 200 if durable else 202
        m.request_seconds.labels("set_resource").observe(time.perf_counter() - start)
        return SetResourceResult(resource=full, nodes=capacity, version=version, durable=durable)

    def _wait_durable(version: int, nodes: dict[str, int]) -> bool:
        if svc.writeback is None:
            return True
        return bool(
            svc.writeback.wait_durable(version, list(nodes), settings.writeback_wait_seconds)
        )

    @app.get("/v1/resources/{name}", tags=["policy"], dependencies=policy_deps)
    def get_resource(name: str) -> ResourceState:
        """One ephemeral resource: capacity, allocated and available per node."""
        full = _full(name)
        state = policy.resource_state(svc.ledger.snapshot(), full)
        if not state.nodes:
            raise ApiError(404, f"resource {full} not found", "name")
        return state

    @app.delete("/v1/resources/{name}", tags=["policy"], dependencies=policy_deps)
    def delete_resource(name: str, response: Response) -> DeleteResourceResult:
        """Remove an ephemeral resource from every node."""
        full = _full(name)
        nodes = svc.ledger.remove_resource(full)
        if not nodes:
            raise ApiError(404, f"resource {full} not found", "name")
        durable = _wait_durable(svc.ledger.version, dict.fromkeys(nodes, 0))
        response.status_code = 200 if durable else 202
        return DeleteResourceResult(resource=full, removed_from=nodes, durable=durable)

    def _full(name: str) -> str:
        try:
            return full_name(settings.resource_domain, name)
        except InvalidResource as e:
            raise ApiError(422, str(e), "name") from e

    @app.get("/v1/gangs", tags=["policy"], dependencies=policy_deps)
    def gangs() -> list[dict[str, Any]]:
        """Gangs the extender has seen: phase, members, reservations, why one waits."""
        return [
            {
                "gang": g.spec.key,
                "phase": g.phase.value,
                "min_members": g.spec.min_members,
                "timeout_seconds": g.spec.timeout,
                "members_seen": len(g.members),
                "reserved": {g.members[u].name: n for u, n in g.reserved.items() if u in g.members},
                "bound": len(g.bound),
                "expires": g.expires or None,
                "reservations": g.reservations,
                "timeouts": g.timeouts,
                "reason": g.reason,
            }
            for g in svc.gangs.gangs()
        ]

    # ESLs over HTTP (/v1/esl): the same token and readiness as the policy API.
    app.include_router(esl_routes.router(svc.esls), dependencies=policy_deps)

    @app.get("/v1/cluster-state", tags=["policy"], dependencies=policy_deps)
    def cluster_state() -> ClusterState:
        """ESCHER's get_cluster_state: per node, capacity / allocated / available of the
        physical (cpu in millicores, memory in bytes, pods) and ephemeral resources."""
        return policy.cluster_state(svc.ledger.snapshot())

    # ---- operations ---------------------------------------------------------------------------

    @app.get("/healthz", tags=["operations"])
    def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["operations"])
    def readyz() -> Response:
        """Readiness: the ledger is rebuilt from the cluster and the view is in sync."""
        ok, why = svc.ready()
        return JSONResponse({"status": "ok" if ok else why}, status_code=200 if ok else 503)

    @app.get("/metrics", tags=["operations"])
    def metrics() -> Response:
        """Prometheus metrics."""
        svc.update_gauges()
        return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)

    return app
