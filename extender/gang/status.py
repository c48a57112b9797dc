"""What GET /v1/gangs shows of each gang: its phase, its members, where each is reserved or
bound, and why it waits, in words a user can act on. Built from the gang manager's state by
`gang_status`; the HTTP route (extender.http.gangs) serves the list.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from extender.gang.state import GangState


class MemberStatus(BaseModel):
    pod: str = Field(description="<namespace>/<name>")
    state: str = Field(
        description="bound, binding, at-bind, reserved, held (behind the gang gate) or waiting"
    )
    node: str | None = Field(None, description="The node it is bound or reserved to.")


class GangStatus(BaseModel):
    gang: str = Field(description="<namespace>/<name>")
    generation: int = Field(description="A gang re-created under the same name is new.")
    phase: str = Field(description="waiting, reserved or bound")
    min_members: int
    timeout_seconds: float
    members: list[MemberStatus]
    unclaimed_places: list[str] = Field(
        description="Nodes reserved for members that do not exist yet."
    )
    expires_in_seconds: float | None = Field(
        None, description="Until the reservation is released if still incomplete."
    )
    retry_in_seconds: float | None = Field(
        None, description="Until the next reservation is tried, while backing off."
    )
    reservations: int = Field(description="Reservations made so far.")
    timeouts: int = Field(description="Reservations released by the timeout.")
    reason: str = Field(description="Why the gang waits, or empty.")


def gang_status(g: GangState, now: float) -> GangStatus:
    reserved = {s.member: s.node for s in g.slots.values() if s.member is not None}
    waiting = g.barrier.waiting if g.barrier is not None else {}
    members = []
    node: str | None
    for uid, m in g.members.items():
        if m.bound:
            state, node = "bound", m.pod.node
        elif uid in g.committed:
            state, node = "binding", reserved.get(uid)
        elif uid in waiting:
            state, node = "at-bind", reserved.get(uid)
        elif uid in reserved:
            state, node = "reserved", reserved[uid]
        elif m.pod.held:
            state, node = "held", None
        else:
            state, node = "waiting", None
        members.append(MemberStatus(pod=m.pod.key, state=state, node=node))
    return GangStatus(
        gang=g.key,
        generation=g.generation,
        phase=g.phase.value,
        min_members=g.spec.min_members,
        timeout_seconds=g.spec.timeout,
        members=members,
        unclaimed_places=[s.node for s in g.slots.values() if s.member is None],
        expires_in_seconds=round(g.expires - now, 3) if g.slots else None,
        retry_in_seconds=round(g.retry_at - now, 3) if g.retry_at > now else None,
        reservations=g.attempts,
        timeouts=g.timeouts,
        reason=g.reason,
    )
