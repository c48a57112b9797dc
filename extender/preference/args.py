"""The preference nominations' args (settings.preference; ESCHER_PREFERENCE_*, `serve
--preference-*`), validated here.

Read by the composition root (extender.service), which hands them to the nominations
(extender.preference.nominations) and to the writer (extender.cluster.build).
"""

from __future__ import annotations

from pydantic import Field

from extender.core.args import Args, Seconds


class PreferenceArgs(Args):
    """Whether and how pods stating a preference are nominated for their preferred node."""

    nominate: bool = Field(
        True,
        description="write the preferred node of each pending pod stating a preference "
        "(escher.io/prefer, escher.io/pack) to its status.nominatedNodeName: kube-scheduler "
        "then checks that node alone and scores none (extender.preference.nominations); "
        "off, every such pod's cycle sends prioritize every feasible node",
    )
    nominate_delay_seconds: Seconds = Field(
        0.1,
        ge=0,
        le=10,
        description="how long a nomination waits, and is then written only if the pod is "
        "still pending: kube-scheduler tries a new pod within milliseconds when it has no "
        "backlog, and prioritize gives it its preferred node anyway (0: at once)",
    )
    nominate_max_pods: int = Field(
        20_000,
        ge=1,
        description="pending pods with a preference tracked for their nominations at most; "
        "beyond it a pod gets none (its cycle scores the nodes, as without nominations)",
    )
