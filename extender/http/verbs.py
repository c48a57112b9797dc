"""kube-scheduler's extender verbs over HTTP: /filter, /prioritize, /bind, /preempt.

The hot path: the body is read once and decoded with msgspec into only the fields decided on
(extender.wire), the decision is taken on the event loop without a thread hop (extender.verbs),
and the reply is encoded with msgspec. No dependency runs but the readiness check, inline.
Each reply carries `Server-Timing: app;dur=<ms>` (parse, decide and encode, apart from the
network), which the benchmarks read. Mounted by extender.app.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request, Response

from extender import wire
from extender.http.deps import Runtime
from extender.http.errors import ERROR_RESPONSES, NotReady

log = logging.getLogger(__name__)

_JSON = "application/json"


def _schema(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _doc(request: str, reply: str | None, reply_list: bool = False) -> dict[str, Any]:
    """OpenAPI of a verb: its body and reply are msgspec types (extender.app adds them)."""
    schema = _schema(reply) if reply is not None else {}
    if reply_list:
        schema = {"type": "array", "items": schema}
    return {
        "openapi_extra": {
            "requestBody": {
                "required": True,
                "content": {_JSON: {"schema": _schema(request)}},
            }
        },
        "responses": {
            200: {"description": "The decision.", "content": {_JSON: {"schema": schema}}},
            **{k: v for k, v in ERROR_RESPONSES.items() if k in (400, 413, 503)},
        },
        "response_class": Response,
    }


WIRE_TYPES = (
    wire.ExtenderArgs,
    wire.ExtenderFilterResult,
    wire.HostPriority,
    wire.ExtenderBindingArgs,
    wire.ExtenderBindingResult,
    wire.ExtenderPreemptionArgs,
    wire.ExtenderPreemptionResult,
)


def router(rt: Runtime) -> APIRouter:
    r = APIRouter(tags=["extender"])
    m = rt.metrics
    verbs = rt.verbs

    def timed(
        verb: str, decide: Callable[[bytes], Awaitable[bytes]]
    ) -> Callable[[Request], Awaitable[Response]]:
        hist = m.request_seconds.labels(verb)

        async def endpoint(request: Request) -> Response:
            start = time.perf_counter()
            ok, why = rt.ready()
            if not ok:
                raise NotReady(f"not ready: {why}")
            body = await decide(await request.body())
            elapsed = time.perf_counter() - start
            hist.observe(elapsed)
            return Response(
                body,
                media_type=_JSON,
                headers={"Server-Timing": f"app;dur={elapsed * 1000:.4f}"},
            )

        return endpoint

    passed, rejected = (
        m.decisions.labels("filter", "passed"),
        m.decisions.labels("filter", "rejected"),
    )

    async def filter_(body: bytes) -> bytes:
        result = verbs.filter(wire.decode(body, wire.ExtenderArgs))
        passed.inc(len(result.NodeNames or (result.Nodes.items if result.Nodes else ())))
        failed = len(result.FailedNodes) + len(result.FailedAndUnresolvableNodes)
        if failed:
            rejected.inc(failed)
        return wire.encode(result)

    scored = m.decisions.labels("prioritize", "scored")

    async def prioritize(body: bytes) -> bytes:
        scores = verbs.prioritize(wire.decode(body, wire.ExtenderArgs))
        if scores:
            scored.inc(len(scores))
        return wire.encode(scores)

    bound, refused = m.decisions.labels("bind", "bound"), m.decisions.labels("bind", "refused")

    async def bind(body: bytes) -> bytes:
        args = wire.decode(body, wire.ExtenderBindingArgs)
        result = await verbs.bind(args)
        if result.Error:
            refused.inc()
            log.info(
                "bind refused",
                extra={
                    "pod": f"{args.PodNamespace}/{args.PodName}",
                    "node": args.Node,
                    "reason": result.Error,
                },
            )
        else:
            bound.inc()
        return wire.encode(result)

    kept, dropped = m.decisions.labels("preempt", "kept"), m.decisions.labels("preempt", "dropped")

    async def preempt(body: bytes) -> bytes:
        args = wire.decode(body, wire.ExtenderPreemptionArgs)
        result = verbs.preempt(args)
        offered = len(args.NodeNameToMetaVictims or args.NodeNameToVictims or {})
        kept.inc(len(result.NodeNameToMetaVictims))
        dropped.inc(offered - len(result.NodeNameToMetaVictims))
        return wire.encode(result)

    r.add_api_route(
        "/filter",
        timed("filter", filter_),
        methods=["POST"],
        summary="kube-scheduler's filter: which of the nodes can take the pod",
        **_doc("ExtenderArgs", "ExtenderFilterResult"),
    )
    r.add_api_route(
        "/prioritize",
        timed("prioritize", prioritize),
        methods=["POST"],
        summary="kube-scheduler's prioritize: a score 0..10 per node, as a bare list",
        **_doc("ExtenderArgs", "HostPriority", reply_list=True),
    )
    r.add_api_route(
        "/bind",
        timed("bind", bind),
        methods=["POST"],
        summary="kube-scheduler's bind: hold the pod's place (or wait for its gang), then bind",
        **_doc("ExtenderBindingArgs", "ExtenderBindingResult"),
    )
    r.add_api_route(
        "/preempt",
        timed("preempt", preempt),
        methods=["POST"],
        summary="kube-scheduler's preempt: the victims that free what the pod needs",
        **_doc("ExtenderPreemptionArgs", "ExtenderPreemptionResult"),
    )
    return r
