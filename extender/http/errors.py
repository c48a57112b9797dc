"""Every error the service can answer with, mapped to its HTTP status in one table.

Each layer raises its own few typed errors (the core's in extender.core.errors, the wire's
BadRequest, the ESLs' in extender.esl.errors, this layer's below); none of them knows HTTP.
Here each type gets its status, and every error reply has one shape: {"error": message,
"field": the offending field or absent}. `render` answers an exception for both the routes
(its handlers are installed by extender.app) and the verbs' endpoint (extender.http.verbs).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from extender.core import errors as core
from extender.core.quantity import InvalidQuantity
from extender.esl import errors as esl
from extender.wire import BadRequest


class HTTPError(Exception):
    """An error of this layer: it names the field like the others do."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class NotReady(HTTPError):
    """The ledger is not rebuilt yet, or this replica is not the leader."""


class NotConfirmed(NotReady):
    """A change was made but not confirmed on the nodes in time, and could be dropped
    (leader election): the outcome is unknown, the caller retries."""


class Unauthorized(HTTPError):
    """No or a wrong credential."""


class Forbidden(HTTPError):
    """The caller is known but may not do this."""


class PayloadTooLarge(HTTPError):
    pass


class RequestTimeout(HTTPError):
    pass


STATUS: dict[type[Exception], int] = {
    BadRequest: 400,
    InvalidQuantity: 422,
    core.InvalidValue: 422,
    core.NoMatch: 422,
    core.UnknownNode: 404,
    core.NotFound: 404,
    core.Conflict: 409,
    core.Unavailable: 503,
    core.CoreError: 422,
    esl.InvalidParameters: 422,
    esl.Unsatisfiable: 422,
    esl.NoRoom: 409,
    esl.UnknownKey: 404,
    esl.UnknownKind: 404,
    esl.InstanceNotFound: 404,
    esl.InstanceExists: 409,
    esl.Unsupported: 409,
    esl.TooMany: 429,
    Unauthorized: 401,
    Forbidden: 403,
    PayloadTooLarge: 413,
    RequestTimeout: 408,
    NotReady: 503,
}


def status_of(e: Exception) -> int:
    for cls in type(e).__mro__:
        status = STATUS.get(cls)
        if status is not None:
            return status
    return 500


class ErrorReply(BaseModel):
    """The body of every error reply."""

    error: str
    field: str | None = None


def error_response(status: int, message: str, field: str | None = None) -> JSONResponse:
    body: dict[str, str] = {"error": message}
    if field:
        body["field"] = field
    headers: dict[str, str] | None = None
    if status == 401:
        headers = {"WWW-Authenticate": "Bearer"}
    elif status in (408, 413):
        # The body was not read to its end: what the client sends next is no request.
        headers = {"Connection": "close"}
    elif status == 503:
        # Close the connection: a client kept alive on a follower (a deposed leader behind a
        # Service: conntrack keeps the connection on it) reconnects, and the Service sends
        # the new connection to the ready replica, the leader.
        headers = {"Connection": "close", "Retry-After": "1"}
    return JSONResponse(body, status_code=status, headers=headers)


ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    status: {"model": ErrorReply, "description": what}
    for status, what in (
        (400, "The body is not what the route takes (malformed JSON, wrong types)."),
        (401, "No or a wrong credential."),
        (403, "The caller may not do this."),
        (404, "What the path or the body names does not exist; `field` names it."),
        (408, "The body did not arrive in time."),
        (409, "The change contradicts what is held or exists now."),
        (413, "The body is too large."),
        (422, "A value is invalid or cannot be satisfied; `field` names it."),
        (429, "The service holds as many of these as it is configured to allow."),
        (
            503,
            "Not ready: the ledger is being rebuilt, or this replica is not the leader, or "
            "(with leader election) cannot make a change durable now; retry.",
        ),
    )
}
# What the edge (extender.http.edge) may answer on any path, before the route is reached.
EDGE_STATUSES = (408, 413)


def documented(*statuses: int) -> dict[int | str, dict[str, object]]:
    """The error replies of `statuses`, as a route's `responses` documents them."""
    return {status: ERROR_RESPONSES[status] for status in statuses}


def openapi_reply(status: int) -> dict[str, object]:
    """The error reply of `status` as an OpenAPI response object (for operations the
    framework does not document: the verbs, and the edge's replies on every path)."""
    return {
        "description": ERROR_RESPONSES[status]["description"],
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorReply"}}},
    }


log = logging.getLogger(__name__)
# The methods a 405's Allow header may list: every one some route serves.
_METHODS = ("DELETE", "GET", "POST", "PUT")


def render(e: Exception, path: str) -> tuple[JSONResponse, bool]:
    """The reply to `e`, raised while serving `path`, and whether it is the client's error
    (a 4xx, which the caller counts). An error not in the table is a defect, not the
    caller's fault: logged with its traceback, never sent."""
    status = status_of(e)
    if status == 500:
        log.exception("internal error", extra={"path": path[:200]})
        return error_response(500, "internal error (logged)"), False
    return error_response(status, str(e), getattr(e, "field", None)), status < 500


def install(app: FastAPI, on_client_error: Callable[[Request, int], None]) -> None:
    """Install the handlers: every error by `render`, FastAPI's validation errors as 422
    naming the field, Starlette's 404 and 405 (with Allow) in the same shape."""

    async def rendered(request: Request, e: Exception) -> Response:
        response, client = render(e, request.url.path)
        if client:
            on_client_error(request, response.status_code)
        return response

    for cls in STATUS:
        app.add_exception_handler(cls, rendered)
    # Anything else reaches Starlette's outermost middleware, which re-raises it once answered.
    app.add_exception_handler(Exception, rendered)

    async def validation(request: Request, e: Exception) -> Response:
        assert isinstance(e, RequestValidationError)
        err = e.errors()[0]
        on_client_error(request, 422 if err["type"] != "json_invalid" else 400)
        if err["type"] == "json_invalid":
            return error_response(400, "body is not valid JSON", "body")
        loc = ".".join(str(p) for p in err["loc"] if p != "body") or "body"
        return error_response(422, f"{loc}: {err['msg']}", loc)

    app.add_exception_handler(RequestValidationError, validation)

    async def http(request: Request, e: Exception) -> Response:
        assert isinstance(e, StarletteHTTPException)
        if isinstance(e.__cause__, HTTPError | BadRequest):
            # The edge's checks of the body, raised while FastAPI read it: it wraps whatever
            # reading raises in a 400 ("error parsing the body"), hiding the 413, the 408, or
            # which field is wrong.
            return await rendered(request, e.__cause__)
        on_client_error(request, e.status_code)
        path = request.url.path[:200]
        if e.status_code == 404:
            return error_response(404, f"no such path: {request.method} {path}")
        if e.status_code == 405:
            response = error_response(405, f"method {request.method} is not allowed on {path}")
            # Every method some route serves at this path: Starlette names only the first
            # route's (PUT alone for /v1/resources/x, which GET and DELETE serve too).
            routes = request.app.router.routes
            allow = [
                method
                for method in _METHODS
                if any(
                    r.matches({**request.scope, "method": method})[0] is Match.FULL for r in routes
                )
            ]
            if allow:
                response.headers["Allow"] = ", ".join(allow)
            return response
        return error_response(e.status_code, str(e.detail))

    app.add_exception_handler(StarletteHTTPException, http)
