"""Operations: /healthz (liveness), /readyz (readiness) and /metrics (Prometheus text).

The probes are async and O(1): they never wait behind a policy call, a thread or a lock, so
a kubelet does not restart a healthy extender while the API server is away. /metrics reads
totals the parts maintain, so a tight scrape loop costs the same at any cluster size; with
settings.metrics_auth it takes the policy API's credentials. Mounted by extender.app.
"""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

from extender.http.deps import Runtime, caller
from extender.http.errors import documented


class Probe(BaseModel):
    status: str


def router(rt: Runtime) -> APIRouter:
    r = APIRouter(tags=["operations"])

    @r.get("/healthz", responses={503: {"model": Probe, "description": "not alive"}})
    async def healthz() -> Response:
        """Liveness: the process and its event loop answer, and its tasks run."""
        ok, why = rt.alive()
        return JSONResponse({"status": "ok" if ok else why}, status_code=200 if ok else 503)

    @r.get("/readyz", responses={503: {"model": Probe, "description": "not ready"}})
    async def readyz() -> Response:
        """Readiness: the ledger is rebuilt from the cluster, and this replica is the leader
        (or runs alone), so a Service routes kube-scheduler's calls to it only."""
        ok, why = rt.ready()
        return JSONResponse({"status": "ok" if ok else why}, status_code=200 if ok else 503)

    deps = [caller("metrics")] if rt.settings.metrics_auth else []
    refusals = documented(401, 403) if rt.settings.metrics_auth else {}

    @r.get(
        "/metrics",
        dependencies=deps,
        response_class=Response,
        responses={
            200: {
                "description": "Prometheus text exposition format.",
                "content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}},
            },
            **refusals,
        },
    )
    async def metrics() -> Response:
        """Prometheus metrics."""
        rt.metrics.scrape()
        return Response(generate_latest(rt.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return r
