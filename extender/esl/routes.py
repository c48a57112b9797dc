"""The /v1/esl endpoints: ESLs created, stepped and deleted over HTTP, inside the service.

Mounted by extender.app under the policy API's bearer token and readiness checks. Instances
run on the service's own ledger (extender.esl.backends.LedgerBackend) and live in the
service's store (extender.esl.registry.Instances), whose loop steps the dynamic ones every
second; POST .../step does one step at once (and takes the application's backlog).

Errors are ESLErrors, answered by extender.app as {"error", "field"}: 400 for a body that is
not JSON, 404 for an unknown kind, instance or key, 409 for a name in use, a policy with no
step, or no room now, 422 for invalid or impossible parameters (the field named).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt
from starlette.concurrency import run_in_threadpool

from extender.esl.base import Change, Dynamic, ESLError, PodRequest
from extender.esl.registry import REGISTRY, Instance, Instances


class BadBody(ESLError):
    status = 400


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


def _view(inst: Instance) -> InstanceView:
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
            durable=inst.backend.durable,
        )


def _reply(inst: Instance, response: Response, ok: int = 200) -> InstanceView:
    view = _view(inst)
    response.status_code = ok if view.durable else 202
    return view


async def _json(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError as e:
        raise BadBody(f"body is not valid JSON: {e}") from e


def _body_schema() -> dict[str, Any]:
    # One body per kind: documented as the union of every ESL's parameters.
    kinds = [cls.Params.model_json_schema() for cls in REGISTRY.values()]
    body = {"application/json": {"schema": {"oneOf": kinds}}}
    return {"requestBody": {"required": True, "content": body}}


def router(store: Instances) -> APIRouter:
    r = APIRouter(prefix="/v1/esl", tags=["esl"])

    @r.post(
        "/{kind}",
        status_code=201,
        response_model=InstanceView,
        responses={202: {"model": InstanceView, "description": "applied, not yet durable"}},
        openapi_extra=_body_schema(),
    )
    async def create(kind: str, request: Request, response: Response) -> InstanceView:
        """Create an ESL instance of `kind` (colocation, antiaffinity, loadbalance, locality,
        binpack, sequencing, queues, fairshare, soft, compose) with the body as its
        parameters; its resources are created before the reply."""
        body = await _json(request)
        # apply() waits for the write-back: not on the event loop.
        inst = await run_in_threadpool(store.create, kind, body)
        return _reply(inst, response, 201)

    @r.get("", response_model=list[InstanceView])
    def list_instances() -> list[InstanceView]:
        """Every ESL instance the service runs."""
        return [_view(i) for i in store.all()]

    @r.get("/{iid}", response_model=InstanceView)
    def get(iid: str) -> InstanceView:
        return _view(store.get(iid))

    @r.post(
        "/{iid}/step",
        response_model=InstanceView,
        responses={202: {"model": InstanceView, "description": "stepped, not yet durable"}},
    )
    def step(iid: str, response: Response, body: StepBody | None = None) -> InstanceView:
        """One step of a dynamic policy now (the service also steps it every second)."""
        return _reply(store.step(iid, body.backlog if body else None), response)

    @r.post(
        "/{iid}/signal/{key}",
        response_model=InstanceView,
        responses={202: {"model": InstanceView, "description": "signalled, not yet durable"}},
    )
    def signal(iid: str, key: str, response: Response) -> InstanceView:
        """Tell a sequencing instance that stage `key` finished: the next stage may run."""
        return _reply(store.signal(iid, key), response)

    @r.delete(
        "/{iid}",
        response_model=DeleteView,
        responses={202: {"model": DeleteView, "description": "removed, not yet durable"}},
    )
    def delete(iid: str, response: Response) -> DeleteView:
        """Remove every resource the instance created, then forget it. 200 once they are
        gone from the ledger and the write-back confirmed it on the nodes."""
        inst, removed = store.delete(iid)
        ledger = inst.backend.ledger
        durable = inst.backend.durable and not any(ledger.has_resource(x) for x in removed)
        response.status_code = 200 if durable else 202
        return DeleteView(id=iid, removed=removed, durable=durable)

    return r
