"""The scheduling verbs' args (settings.scheduling; their variables and flags keep their own
names: ESCHER_BIND_IN_FLIGHT, `serve --requeue-window-seconds`).

Read by the composition root (extender.service) for the verbs, the requeue and the gang's
answers, and by extender.scheduling.kube.build for the binder and the waker.
"""

from __future__ import annotations

from pydantic import Field

from extender.core.args import Args, Seconds


class SchedulingArgs(Args):
    """What the verbs remember between calls, and how a bind burst is paced."""

    filtered_max_pods: int = Field(
        50_000, ge=1, description="pods seen at filter and not yet bound, kept for their bind"
    )
    filtered_max_bytes: int = Field(
        64 * 1024 * 1024, ge=1024, description="... and their size at most"
    )
    requeue_window_seconds: Seconds = Field(
        5.0,
        ge=0,
        description="a pod turned away for an ephemeral resource is touched (so kube-scheduler "
        "retries it) when a holding of it is released within this time; 0: off",
    )
    requeue_max_pods: int = Field(10_000, ge=1, description="pods remembered for that at most")
    max_learned_nodes: int = Field(
        10_000, ge=1, description="standalone mode: nodes learnt from requests at most"
    )
    bind_in_flight: int = Field(
        64,
        ge=1,
        le=1024,
        description="Bindings in flight at most: a gang's bind burst takes this many API "
        "calls at a time, so its answers come back in loop turns of at most this many",
    )
    bind_answers_per_turn: int = Field(
        16,
        ge=1,
        le=1024,
        description="gang members' bind answers sent in one turn of the event loop at most "
        "(the rest in the turns after), so that a bind burst's Bindings coming back together, "
        "or a gang's held members refused together, do not hold the loop for all of their "
        "answers",
    )
