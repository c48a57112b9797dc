"""kube-scheduler's extender verbs over HTTP: POST /filter, /prioritize, /bind, /preempt.

The hot path, served as a plain ASGI endpoint that the edge (extender.http.edge) calls before
any routing: kube-scheduler calls filter and prioritize for every pod, one pod at a time,
inside its scheduling cycle, and the web framework's routing, request objects and dependency
machinery cost as much as the decision itself. The body is read once and decoded with
msgspec into only the fields decided on (extender.wire), the decision is taken on the event
loop without a thread hop (extender.scheduling.verbs), and the reply is encoded with msgspec.
Errors are answered by the same function as on every route (extender.http.errors.render).
Each reply carries `Server-Timing: app;dur=<ms>` (read, decide and encode), which the
benchmarks read.

The verbs are documented in the OpenAPI document like every route (`openapi_paths`, added by
extender.app), with the msgspec types' schemas.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.types import Receive, Scope, Send

from extender import wire
from extender.http import errors
from extender.http.errors import NotReady
from extender.logs import Sampled
from extender.metrics import Metrics
from extender.scheduling.verbs import Verbs

log = logging.getLogger(__name__)

_JSON = "application/json"

WIRE_TYPES = (
    wire.ExtenderArgs,
    wire.ExtenderFilterResult,
    wire.HostPriority,
    wire.ExtenderBindingArgs,
    wire.ExtenderBindingResult,
    wire.ExtenderPreemptionArgs,
    wire.ExtenderPreemptionResult,
)

Decide = Callable[[bytes], Awaitable[bytes]]


class VerbEndpoints:
    """The four verbs as one ASGI endpoint, dispatched on the path."""

    def __init__(
        self, verbs: Verbs, metrics: Metrics, ready: Callable[[], tuple[bool, str]]
    ) -> None:
        self.verbs = verbs
        self.metrics = metrics
        self.ready = ready
        m = metrics
        self._filter_nodes = m.filter_nodes
        self._passed = m.decisions.labels("filter", "passed")
        self._rejected = m.decisions.labels("filter", "rejected")
        self._scored = m.decisions.labels("prioritize", "scored")
        self._bound = m.decisions.labels("bind", "bound")
        self._refused = m.decisions.labels("bind", "refused")
        # A gang's held members are refused together when its reservation expires.
        self._refusals = Sampled(log, "bind refused")
        self._kept = m.decisions.labels("preempt", "kept")
        self._dropped = m.decisions.labels("preempt", "dropped")
        self.routes: dict[str, tuple[Decide, Any]] = {
            "/filter": (self._filter, m.request_seconds.labels("filter")),
            "/prioritize": (self._prioritize, m.request_seconds.labels("prioritize")),
            "/bind": (self._bind, m.request_seconds.labels("bind")),
            "/preempt": (self._preempt, m.request_seconds.labels("preempt")),
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        start = time.perf_counter()
        if scope["method"] != "POST":
            response = errors.error_response(
                405, f"method {scope['method']} is not allowed on {path}"
            )
            response.headers["Allow"] = "POST"
            self.metrics.client_errors.labels(path, "405").inc()
            await response(scope, receive, send)
            return
        decide, seconds = self.routes[path]
        try:
            ok, why = self.ready()
            if not ok:
                raise NotReady(f"not ready: {why}")
            body = await decide(await _read(receive))
        except Exception as e:  # answered as on every route
            response, client = errors.render(e, path)
            if client:
                self.metrics.client_errors.labels(path, str(response.status_code)).inc()
            await response(scope, receive, send)
            return
        elapsed = time.perf_counter() - start
        seconds.observe(elapsed)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"server-timing", f"app;dur={elapsed * 1000:.4f}".encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _filter(self, body: bytes) -> bytes:
        filtered = await self.verbs.filter(wire.decode(body, wire.ExtenderArgs))
        result, named = filtered.reply, filtered.named
        passed = len(result.NodeNames or (result.Nodes.items if result.Nodes else ()))
        self._filter_nodes.observe(named)
        self._passed.inc(passed)
        if named > passed:  # every node named that does not pass is turned away
            self._rejected.inc(named - passed)
        return wire.encode(result)

    async def _prioritize(self, body: bytes) -> bytes:
        scores = self.verbs.prioritize(wire.decode(body, wire.ExtenderArgs))
        if scores:
            self._scored.inc(len(scores))
        return wire.encode(scores)

    async def _bind(self, body: bytes) -> bytes:
        args = wire.decode(body, wire.ExtenderBindingArgs)
        result = await self.verbs.bind(args)
        if result.Error:
            self._refused.inc()
            self._refusals.info(
                pod=f"{args.PodNamespace}/{args.PodName}", node=args.Node, reason=result.Error
            )
        else:
            self._bound.inc()
        return wire.encode(result)

    async def _preempt(self, body: bytes) -> bytes:
        args = wire.decode(body, wire.ExtenderPreemptionArgs)
        result = self.verbs.preempt(args)
        offered = len(args.NodeNameToMetaVictims or args.NodeNameToVictims or {})
        self._kept.inc(len(result.NodeNameToMetaVictims))
        self._dropped.inc(offered - len(result.NodeNameToMetaVictims))
        return wire.encode(result)


async def _read(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def openapi_paths() -> dict[str, Any]:
    """The verbs' entries of the OpenAPI document: bodies and replies are msgspec types."""

    def operation(summary: str, request: str, reply: dict[str, Any]) -> dict[str, Any]:
        ref = {"$ref": f"#/components/schemas/{request}"}
        responses: dict[str, Any] = {
            "200": {"description": "The decision.", "content": {_JSON: {"schema": reply}}}
        }
        for status in (400, 503):  # and the edge's, which extender.app adds everywhere
            responses[str(status)] = errors.openapi_reply(status)
        return {
            "post": {
                "tags": ["extender"],
                "summary": summary,
                "operationId": summary.split(":")[0].replace("kube-scheduler's ", "") + "_verb",
                "requestBody": {"required": True, "content": {_JSON: {"schema": ref}}},
                "responses": responses,
            }
        }

    def schema(name: str) -> dict[str, Any]:
        return {"$ref": f"#/components/schemas/{name}"}

    return {
        "/filter": operation(
            "filter: which of the nodes can take the pod", "ExtenderArgs",
            schema("ExtenderFilterResult"),
        ),
        "/prioritize": operation(
            "prioritize: a score 0..10 per node, as a bare list", "ExtenderArgs",
            {"type": "array", "items": schema("HostPriority")},
        ),
        "/bind": operation(
            "bind: hold the pod's place (or wait for its gang), then bind it",
            "ExtenderBindingArgs", schema("ExtenderBindingResult"),
        ),
        "/preempt": operation(
            "preempt: the victims that free what the pod needs", "ExtenderPreemptionArgs",
            schema("ExtenderPreemptionResult"),
        ),
    }  # fmt: skip
