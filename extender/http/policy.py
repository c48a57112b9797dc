"""ESCHER's policy API over HTTP: /v1/resources/{name} and /v1/cluster-state.

Changes go through the runtime's PolicyStore (extender.policies.store: the ledger itself, or with
policies kept as objects the EphemeralResource objects it reconciles), which keeps work
proportional to the nodes off the event loop and awaits the write-back holding no thread.
Reads (one resource, the cluster state) render the ledger in a worker thread. A change
answers 200 once it is on the Node objects and, when the configured wait
ran out first, 202 (the write-back keeps trying; `durable: false` says so) or, with leader
election, 503 (extender.http.deps.settled says why). Mounted by
extender.app, behind readiness and the caller's authorization (extender.http.deps).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response
from starlette.concurrency import run_in_threadpool

from extender.core import names
from extender.http.deps import Runtime, accepting, caller, ready, settled
from extender.http.errors import documented
from extender.policies import api as policy
from extender.policies.api import (
    ClusterState,
    DeleteResourceResult,
    ResourceSpec,
    ResourceState,
    SetResourceResult,
)

_JSON = "application/json"


# The client's precondition on a PUT or DELETE: the object as it read it.
ResourceVersion = Annotated[
    str | None,
    Query(
        alias="resourceVersion",
        pattern=r"^[0-9]{1,20}$",
        description="Change only the resource's EphemeralResource object at this "
        "resourceVersion (as read with kubectl): 409 if another writer changed it since, "
        "nothing changed. Only where policies are kept as objects.",
    ),
]


def router(rt: Runtime) -> APIRouter:
    r = APIRouter(
        prefix="/v1",
        tags=["policy"],
        dependencies=[Depends(ready)],
        responses=documented(400, 401, 403, 422, 503),
    )
    # One route each, in this order (the OpenAPI document lists them so).
    for add in (_set_resource, _get_resource, _delete_resource, _cluster_state):
        add(r, rt)
    return r


def _set_resource(r: APIRouter, rt: Runtime) -> None:
    set_seconds = rt.metrics.request_seconds.labels("set_resource")

    @r.put(
        "/resources/{name}",
        dependencies=[caller("resources"), Depends(accepting)],
        responses={
            202: {"model": SetResourceResult, "description": "applied, not yet durable"},
            **documented(404, 409),
        },
    )
    async def set_resource(
        name: str,
        spec: ResourceSpec,
        response: Response,
        resource_version: ResourceVersion = None,
    ) -> SetResourceResult:
        """ESCHER's set_resource: create, resize or (capacity 0) remove an ephemeral resource
        on a node, the nodes with these labels, the nodes whose available resources cover a
        vector, or every node (at most num_nodes of them)."""
        with set_seconds.time():
            result = await rt.store.set_resource(name, spec, resource_version)
        response.status_code = settled(rt, result.durable)
        return result


def _get_resource(r: APIRouter, rt: Runtime) -> None:
    @r.get("/resources/{name}", dependencies=[caller("resources")], responses=documented(404))
    async def get_resource(name: str) -> ResourceState:
        """One ephemeral resource: capacity, allocated and available per node."""
        full = names.full_name(rt.settings.resource_domain, name)
        return await run_in_threadpool(policy.resource_state, rt.ledger.snapshot(), full)


def _delete_resource(r: APIRouter, rt: Runtime) -> None:
    @r.delete(
        "/resources/{name}",
        dependencies=[caller("resources"), Depends(accepting)],
        responses={
            202: {"model": DeleteResourceResult, "description": "removed, not yet durable"},
            **documented(404, 409),
        },
    )
    async def delete_resource(
        name: str,
        response: Response,
        force: Annotated[
            bool,
            Query(description="Remove it even while pods hold it (they keep running)."),
        ] = False,
        resource_version: ResourceVersion = None,
    ) -> DeleteResourceResult:
        """Remove an ephemeral resource from every node. Refused (409) while pods hold it,
        unless `force`: then the holders keep running, as with any extended resource removed
        from a node, and new pods can no longer request it."""
        result = await rt.store.delete_resource(name, force, resource_version)
        response.status_code = settled(rt, result.durable)
        return result


def _cluster_state(r: APIRouter, rt: Runtime) -> None:
    @r.get(
        "/cluster-state",
        dependencies=[caller("resources")],
        response_model=ClusterState,
        response_class=Response,
        responses={
            200: {"content": {_JSON: {"schema": {"$ref": "#/components/schemas/ClusterState"}}}}
        },
    )
    async def cluster_state() -> Response:
        """ESCHER's get_cluster_state: per node, capacity / allocated / available of the
        physical (cpu in millicores, memory in bytes, pods) and ephemeral resources."""
        snap = rt.ledger.snapshot()
        body = await run_in_threadpool(policy.cluster_state_json, snap)
        return Response(body, media_type=_JSON)
