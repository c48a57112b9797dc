"""GET /v1/gangs: each gang's phase, its members, where each is reserved or bound, and why it
waits. Rendered on the event loop, where the gang manager lives (bounded by the gangs that
exist). Mounted by extender.app, behind readiness and the caller's authorization.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends

from extender.gang.status import GangStatus, gang_status
from extender.http.deps import Runtime, caller, ready
from extender.http.errors import documented


def router(rt: Runtime) -> APIRouter:
    r = APIRouter(
        prefix="/v1",
        tags=["gangs"],
        dependencies=[Depends(ready), caller("gangs")],
        responses=documented(401, 403, 503),
    )

    @r.get("/gangs")
    async def gangs() -> list[GangStatus]:
        """Every gang the extender knows: phase, members, reservations, why one waits."""
        now = rt.gangs.clock()
        return [gang_status(g, now) for g in rt.gangs.gangs()]

    return r
