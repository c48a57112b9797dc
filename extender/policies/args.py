"""The policy feature's args (settings.policy; ESCHER_POLICY_*, `serve --policy-*`).

Read by the composition root: with `objects`, the policies are kept as objects by the leader
(extender.policies.kube.build), else in memory (extender.policies.store).
"""

from __future__ import annotations

from pydantic import Field

from extender.core.args import Args, Seconds


class PolicyArgs(Args):
    """Where policies are kept, and how often the kept ones are reconciled."""

    objects: bool = Field(
        True,
        description="keep policies as EphemeralResource and ESL objects (the CRDs of "
        "deploy/crds), reconciled by the leader, the policy API a façade over them; off: in "
        "the leader's memory only (always so in mode standalone)",
    )
    resync_seconds: Seconds = Field(
        10.0,
        gt=0,
        description="how often policy objects not settled are reconciled again, and their "
        "status's usage refreshed",
    )
