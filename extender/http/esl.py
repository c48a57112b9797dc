"""The /v1/esl endpoints: ESLs created, stepped, signalled and deleted over HTTP.

Instances run on the service's own ledger (extender.esl.backends.LedgerBackend) and live in
its registry (extender.esl.registry.Instances), whose thread steps the dynamic ones every
second; POST .../step does one step at once (and takes the application's backlog). Changes
go through the runtime's PolicyStore (extender.policies.store), which runs ESL calls in
worker threads and, with policies kept as objects, writes the ESL object first.
Errors are the ESLs' and the core's own (extender.esl.errors, extender.core.errors), answered
by the one table (extender.http.errors). Mounted by extender.app, behind readiness and the
caller's authorization.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt
from pydantic.json_schema import models_json_schema
from starlette.concurrency import run_in_threadpool

from extender import wire
from extender.esl.base import Change, Dynamic, PodRequest
from extender.esl.registry import REGISTRY, Applied, Instance
from extender.http.deps import Runtime, accepting, caller, ready, settled
from extender.http.errors import documented


class InstanceView(BaseModel):
    """An ESL instance: what it created and what its pods must request."""

    id: str = Field(description="<kind>-<name>: the path of the instance's other calls")
    kind: str
    params: dict[str, Any]
    resources: list[str] = Field(description="Full names of every resource it created.")
    requests: dict[str, PodRequest] = Field(
        description='Per key (group, queue, user, stage; "" when all pods are alike): '
        "what a pod puts in its container limits, labels and annotations."
    )
    dynamic: bool = Field(description="Whether it has a step (the service steps it each second).")
    steps: int
    changes: list[Change] = Field(description="What the last step or signal changed.")
    durable: bool = Field(description="False (HTTP 202) if not yet confirmed on the nodes.")


class StepBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backlog: dict[str, StrictInt] | None = Field(
        None, description="Pending pods per key (queues, fair share): the demand to share by."
    )


class DeleteView(BaseModel):
    id: str
    removed: list[str] = Field(description="The resources it had created, now removed.")
    durable: bool = Field(description="True once gone from the ledger and from the nodes.")


def _view(inst: Instance, durable: bool | None = None) -> InstanceView:
    """The instance; `durable` is the call's own (Applied), else what its backend says now."""
    esl = inst.esl
    with inst.lock:  # the service's step loop may be changing it
        return InstanceView(
            id=inst.id,
            kind=inst.kind,
            params=esl.params.model_dump(mode="json"),
            resources=esl.resources(),
            requests={k: esl.requests_for(k) for k in esl.request_keys()},
            dynamic=isinstance(esl, Dynamic),
            steps=inst.steps,
            changes=inst.last_changes,
            durable=inst.backend.durable if durable is None else durable,
        )


def _reply(rt: Runtime, applied: Applied, response: Response, ok: int = 200) -> InstanceView:
    view = _view(applied.instance, applied.durable)
    response.status_code = settled(rt, applied.durable, ok)
    return view


async def _json(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        return None
    return wire.decode(raw, object)


def _body_schema() -> dict[str, Any]:
    # One body per kind: documented as the union of every ESL's parameters, whose schemas
    # extender.app adds to the components (esl_components).
    kinds = [{"$ref": f"#/components/schemas/{cls.Params.__name__}"} for cls in REGISTRY.values()]
    body = {"application/json": {"schema": {"oneOf": kinds}}}
    return {"requestBody": {"required": True, "content": body}}


def esl_components() -> dict[str, Any]:
    """The JSON schemas of every ESL's parameters, as OpenAPI components."""
    _, defs = models_json_schema(
        [(cls.Params, "validation") for cls in REGISTRY.values()],
        ref_template="#/components/schemas/{model}",
    )
    components: dict[str, Any] = defs.get("$defs", {})
    return components


# POST names a kind where GET and DELETE name an instance, in the same place of the path: one
# path template to OpenAPI (two templates differing only in their parameter's name are the
# same path, which a document must not hold twice).
_Kind = Annotated[
    str,
    Path(
        alias="iid",
        description="The kind of ESL to create (GET and DELETE name an instance here).",
        # Documented, not validated here: an unknown kind is the registry's 404, by name.
        json_schema_extra={"enum": list(REGISTRY)},
    ),
]


def router(rt: Runtime) -> APIRouter:
    store = rt.esls
    r = APIRouter(
        prefix="/v1/esl",
        tags=["esl"],
        dependencies=[Depends(ready), caller("esl"), Depends(accepting)],
        responses=documented(400, 401, 403, 422, 503),
    )

    @r.post(
        "/{iid}",
        status_code=201,
        response_model=InstanceView,
        responses={
            202: {"model": InstanceView, "description": "applied, not yet durable"},
            **documented(404, 409, 429),
        },
        openapi_extra=_body_schema(),
    )
    async def create(kind: _Kind, request: Request, response: Response) -> InstanceView:
        """Create an ESL instance of `kind` (colocation, antiaffinity, loadbalance, locality,
        binpack, sequencing, queues, fairshare, soft, compose) with the body as its
        parameters; its resources are created before the reply."""
        body = await _json(request)
        applied = await rt.store.create_esl(kind, body)
        return await run_in_threadpool(_reply, rt, applied, response, 201)

    @r.get("", response_model=list[InstanceView])
    async def list_instances() -> list[InstanceView]:
        """Every ESL instance the service runs."""
        return await run_in_threadpool(lambda: [_view(i) for i in store.all()])

    @r.get("/{iid}", response_model=InstanceView, responses=documented(404))
    async def get(iid: str) -> InstanceView:
        return await run_in_threadpool(lambda: _view(store.get(iid)))

    @r.post(
        "/{iid}/step",
        response_model=InstanceView,
        responses={
            202: {"model": InstanceView, "description": "stepped, not yet durable"},
            **documented(404, 409),
        },
    )
    async def step(iid: str, response: Response, body: StepBody | None = None) -> InstanceView:
        """One step of a dynamic policy now (the service also steps it every second)."""
        backlog = body.backlog if body else None
        applied = await rt.store.step_esl(iid, backlog)
        return await run_in_threadpool(_reply, rt, applied, response)

    @r.post(
        "/{iid}/signal/{key}",
        response_model=InstanceView,
        responses={
            202: {"model": InstanceView, "description": "signalled, not yet durable"},
            **documented(404, 409),
        },
    )
    async def signal(iid: str, key: str, response: Response) -> InstanceView:
        """Tell a sequencing instance that stage `key` finished: the next stage may run."""
        applied = await rt.store.signal_esl(iid, key)
        return await run_in_threadpool(_reply, rt, applied, response)

    @r.delete(
        "/{iid}",
        response_model=DeleteView,
        responses={
            202: {"model": DeleteView, "description": "removed, not yet durable"},
            **documented(404, 409),
        },
    )
    async def delete(iid: str, response: Response) -> DeleteView:
        """Remove every resource the instance created, then forget it. 200 once they are
        gone from the ledger and the write-back confirmed it on the nodes."""
        applied = await rt.store.delete_esl(iid)
        response.status_code = settled(rt, applied.durable)
        return DeleteView(id=iid, removed=list(applied.removed), durable=applied.durable)

    return r
