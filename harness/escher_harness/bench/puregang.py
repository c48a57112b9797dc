"""The gang ESL: ESCHER's pure approach to all-or-nothing placement.

Uses only the policy API (set_resource / get_cluster_state) and pod creation; plain
kube-scheduler does the matching. Per attempt: find room for the whole gang in the cluster
state, create a per-gang ephemeral resource on the chosen nodes with one unit per member
placed there, create the members each requesting one unit, and wait. If the gang has not fully
bound within the attempt timeout, roll back (delete the pods and the resource) and retry after
an exponential backoff. Once complete, the gang's resource is removed (the pods stay bound).

What this approach cannot do, as the ESCHER paper admits: there is no transaction, so between
reading the cluster state and the pods binding, other pods can take the room (the attempt
then times out and rolls back). Called by the gang benchmark and by applications.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from escher_harness.workload import pod_manifest
from extender.core.names import CPU, MEMORY, PODS
from extender.core.quantity import amount
from extender.esl.client import PolicyClient
from extender.esl.gang import plan

NAME = "gang"


class Pods(Protocol):
    """What the ESL needs of pod creation (escher_harness.workload.Workload has it)."""

    def create(self, manifest: Mapping[str, Any]) -> None: ...

    def delete(self, names: Sequence[str]) -> None: ...

    def bound(self, names: Sequence[str], timeout: float) -> int: ...


@dataclass(frozen=True)
class GangRequest:
    name: str  # unique: names the gang's resource and pods
    members: int
    cpu: str = "1"
    memory: str = "1Gi"
    attempt_timeout: float = 10.0
    deadline: float = 60.0  # give up after this long in all
    backoff: float = 0.5
    max_backoff: float = 8.0
    labels: Mapping[str, str] | None = None


@dataclass
class GangResult:
    completed: bool
    attempts: int = 0
    rollbacks: int = 0
    reason: str = ""
    pods: tuple[str, ...] = ()


class PureGang:
    def __init__(
        self,
        policy: PolicyClient,
        pods: Pods,
        domain: str = "escher.io",
        manifest: Callable[..., dict[str, Any]] | None = None,
        on_event: Callable[[str, str], None] = lambda kind, gang: None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.policy = policy
        self.pods = pods
        self.domain = domain
        self.manifest = manifest or pod_manifest
        self.on_event = on_event
        self.sleep = sleep

    def run(self, req: GangRequest) -> GangResult:
        need = {
            CPU: amount(CPU, req.cpu, field="cpu"),
            MEMORY: amount(MEMORY, req.memory, field="memory"),
            PODS: 1,
        }
        resource = f"gang-{req.name}"
        full = f"{self.domain}/{resource}"
        end = time.monotonic() + req.deadline
        backoff = req.backoff
        result = GangResult(completed=False)
        while True:
            state = self.policy.cluster_state()
            placement = plan(state, req.members, need, "available")
            if not placement and not plan(state, req.members, need, "capacity"):
                result.reason = (
                    f"gang {req.name} can never fit: {req.members} members of cpu {req.cpu}, "
                    f"memory {req.memory}"
                )
                return result
            if placement:
                result.attempts += 1
                names = [f"{req.name}-{result.attempts}-{i}" for i in range(req.members)]
                for node, k in placement.items():
                    self.policy.set_resource(resource, k, node=node)
                for n in names:
                    self.pods.create(
                        self.manifest(
                            n,
                            limits={full: "1"},
                            requests={CPU: req.cpu, MEMORY: req.memory},
                            labels=req.labels,
                        )
                    )
                timeout = min(req.attempt_timeout, max(0.0, end - time.monotonic()))
                if self.pods.bound(names, timeout) == req.members:
                    self.policy.delete_resource(resource, force=True)  # the pods stay bound
                    result.completed, result.pods = True, tuple(names)
                    return result
                self.pods.delete(names)
                self.policy.delete_resource(resource, force=True)
                result.rollbacks += 1
                self.on_event("rollback", req.name)
            if time.monotonic() + backoff > end:
                result.reason = f"gang {req.name} did not complete within {req.deadline:g}s"
                return result
            self.sleep(backoff)
            backoff = min(backoff * 2, req.max_backoff)
