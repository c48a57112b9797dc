"""Leader election's args (settings.leader_election), validated here: kube-scheduler's
leaderElection, under the names its ESCHER_* variables and `serve` flags have always had
(--leader-elect, --lease-name, ...).

Read by the composition root of the Kubernetes side (extender.cluster.build), which builds
the elector (extender.cluster.leader) from them, and by the service (how long a release may
take at stop).
"""

from __future__ import annotations

from pydantic import Field, model_validator

from extender.core.args import Args, Seconds


class LeaderElectionArgs(Args):
    """Whether replicas elect a leader, over which Lease, at which pace (kube-scheduler's
    defaults)."""

    leader_elect: bool = Field(False, description="run as one of several replicas")
    lease_name: str = Field("escher-extender", description="the Lease replicas compete for")
    lease_namespace: str = Field("kube-system", description="its namespace")
    lease_duration_seconds: Seconds = Field(15.0, gt=0, description="the lease's duration")
    renew_deadline_seconds: Seconds = Field(
        10.0, gt=0, description="a leader that cannot renew within this steps down"
    )
    retry_period_seconds: Seconds = Field(2.0, gt=0, description="between renewals and tries")
    identity: str | None = Field(
        None, description="this replica's name in the lease (default: hostname_pid)"
    )

    @model_validator(mode="after")
    def _times(self) -> LeaderElectionArgs:
        if not self.leader_elect:
            return self
        if self.renew_deadline_seconds >= self.lease_duration_seconds:
            raise ValueError(
                "renew_deadline_seconds must be below lease_duration_seconds, or a "
                "deposed leader could still write after another won the lease"
            )
        if self.retry_period_seconds >= self.renew_deadline_seconds:
            raise ValueError("retry_period_seconds must be below renew_deadline_seconds")
        return self
