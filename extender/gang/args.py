"""The gang feature's args (settings.gang; ESCHER_GANG_*, `serve --gang-*`), validated here.

Read by the composition root (extender.service), which hands them whole to the gang manager,
the gate and the gang's Kubernetes side (extender.gang.kube.build).
"""

from __future__ import annotations

from pydantic import Field, field_validator

from extender.core.args import Args, Seconds
from extender.gang.planning import DEFAULT_OFFLOAD, Offload
from extender.gang.topology import DEFAULT, Hierarchy, parse


class GangArgs(Args):
    """How gangs wait, are planned, gated and nominated."""

    wait_seconds: Seconds = Field(
        180.0,
        gt=0,
        description="how long a member's bind waits for the rest of its gang, at most (its "
        "reservation's expiry, after gang-timeout without progress, ends the wait sooner); "
        "below the httpTimeout of the bind entry in the KubeSchedulerConfiguration. Every "
        "member must be at bind at once, so the first waits while kube-scheduler takes the "
        "others' cycles one at a time: a gang of 10,000 at 75 cycles a second, 133 s",
    )
    expiry_interval_seconds: Seconds = Field(
        1.0, gt=0, description="how often expired gang reservations are looked for"
    )
    backoff_initial_seconds: Seconds = Field(
        1.0, gt=0, description="backoff before a gang whose reservation expired tries again"
    )
    backoff_max_seconds: Seconds = Field(60.0, gt=0, description="... at most")
    plan_offload_above: int = Field(
        DEFAULT_OFFLOAD.background,
        ge=0,
        description="a gang planned in the background (the gang gate) is planned in a worker "
        "thread above this much work, inline below: nodes times the passes its topology makes "
        "over them (1 plain, 2 packed, 5 with a required level, 6 preferred), plus members",
    )
    filter_plan_offload_above: int = Field(
        DEFAULT_OFFLOAD.filter,
        ge=0,
        description="... and one planned in its first member's filter (kube-scheduler's "
        "scheduling cycle waits for that call; its binding cycles, other gangs' binds, do not)",
    )
    lift_interval_seconds: Seconds = Field(
        1.0,
        gt=0,
        description="how often held gangs are planned again without a pod event (room a node "
        "added or grew)",
    )
    gate_switch: str = Field(
        "",
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?)?$",
        max_length=317,
        description="NAMESPACE/NAME of the ConfigMap deploy/'s adaptive gang-gate policy reads: "
        "the extender sets its hold while gangs wait for room (empty: none written)",
    )
    nominate: bool = Field(
        True,
        description="write each gang member's reserved node to its status.nominatedNodeName: "
        "kube-scheduler then tries that node alone, and counts the reservation against other "
        "pods (extender.gang.kube.nominator)",
    )
    nominate_delay_seconds: Seconds = Field(
        0.1,
        ge=0,
        le=10,
        description="how long the nomination of a member whose scheduling cycle may come "
        "first (created after its gang's reservation) waits, and is then written only if that "
        "cycle has not come: kube-scheduler tries a new pod within milliseconds when it has no "
        "backlog, and the member's filter gives it its place anyway (0: at once; "
        "extender.gang.nominations)",
    )
    topology: str = Field(
        DEFAULT,
        max_length=2048,
        description="topology levels gangs may require or prefer, outermost first: "
        "name=node-label-key,... (extender.gang.topology)",
    )
    gate_cooldown_seconds: Seconds = Field(
        10.0, ge=0, description="... and keeps it this long after"
    )
    gather_hold_seconds: Seconds = Field(
        2.0,
        ge=0,
        description="a gang still waiting for members to be created this long after its first "
        "is gathering slowly: the adaptive gang gate holds new members, and its held members "
        "stay held until its minimum exists, so that none waits at bind for members not "
        "created yet (a gang of 10,000 takes minutes to create)",
    )

    gather_lead_seconds: Seconds = Field(
        60.0,
        ge=0,
        description="... and lets them through once its last members are expected within "
        "this (at the pace its members were created so far), so that their scheduling cycles "
        "overlap the last creations; below wait_seconds, which the first of them waits at "
        "bind (0: only once its minimum exists)",
    )

    @field_validator("topology")
    @classmethod
    def _topology(cls, v: str) -> str:
        return str(parse(v))  # its ValueError names the bad level

    @property
    def hierarchy(self) -> Hierarchy:
        return parse(self.topology)

    @property
    def backoff(self) -> tuple[float, float]:
        """A gang's retry backoff after its reservation expired: first, and longest."""
        return self.backoff_initial_seconds, self.backoff_max_seconds

    @property
    def offload(self) -> Offload:
        return Offload(self.plan_offload_above, self.filter_plan_offload_above)


DEFAULT_ARGS = GangArgs()
