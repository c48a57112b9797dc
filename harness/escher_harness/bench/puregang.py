"""ESCHER's pure approach to gang scheduling, run end to end: the runner the benchmark uses.

Uses only the policy API (set_resource / get_cluster_state) and pod creation; plain
kube-scheduler does the matching. The gang ESL (extender.esl.gang) plans a gang's resource and
its members' requests; this runner adds what an ESL cannot do, creating and deleting pods,
in one of ESCHER's two variants:

- **plan** (ESCHER's library variant): find room for the whole gang in the cluster state,
  create a per-gang resource with one unit per member on the chosen nodes, create the members
  (each requesting one unit, and its cpu and memory), and wait.
- **placeholders** (ESCHER's "ghost tasks"): first create one placeholder pod per member
  requesting the member's cpu and memory, so kube-scheduler itself finds and holds the
  physical room; once every placeholder is bound, create the gang resource where they
  landed, delete them and create the members in their place.

Topology: a request's `esl_params` are further parameters of the gang ESL, as an application
would give them (the benchmark's topology entry: `required_topology` or `preferred_topology`
and a level). They are checked against the ESL's GangParams and given to its plan() when it
takes them; those it does not know are not used, and the result says so (`ignored`).

Either way, if the gang is not fully bound within the attempt timeout, the attempt is rolled
back (its pods and its resource deleted) and retried after an exponential backoff; once the
gang is complete its resource is removed (the pods stay bound).

What neither can do, as the ESCHER paper admits: there is no transaction, so between a plan
(or a placeholder's deletion) and the members binding, other pods can take the room; the
attempt then times out and rolls back. Placeholders narrow that window to the replacement.
Called by the gang benchmark (escher_harness.bench.approaches) and the e2e tests.
"""

from __future__ import annotations

import inspect
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from escher_harness.workload import pod_manifest
from extender.core.names import CPU, MEMORY, PODS
from extender.core.quantity import amount
from extender.esl.client import PolicyClient
from extender.esl.gang import GangParams, plan

PLACEHOLDER_LABEL = "harness.escher.io/placeholder-for"


class Pods(Protocol):
    """What the runner needs of pods (escher_harness.workload.Workload has it)."""

    def create(self, manifest: Mapping[str, Any]) -> None: ...

    def delete(self, names: Sequence[str]) -> None: ...

    def bound(self, names: Sequence[str], timeout: float) -> int: ...

    def nodes(self, names: Sequence[str]) -> dict[str, str | None]:
        """Where each pod is bound (None: pending)."""
        ...


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
    annotations: Mapping[str, str] | None = None
    # Further GangParams of the gang ESL (e.g. {"required_topology": "rack"}), kept apart
    # from the fields above so that a parameter the ESL gains needs no change here.
    esl_params: Mapping[str, Any] | None = None


@dataclass
class GangResult:
    completed: bool
    attempts: int = 0
    rollbacks: int = 0
    reason: str = ""
    pods: tuple[str, ...] = ()
    # esl_params not used, each with why (unknown to GangParams, or not taken by plan()).
    ignored: dict[str, str] | None = None


def esl_params_used(req: GangRequest) -> tuple[dict[str, Any], dict[str, str]]:
    """The request's esl_params the gang ESL's plan() takes, and those it does not (why)."""
    extra = dict(req.esl_params or {})
    if not extra:
        return {}, {}
    ignored: dict[str, str] = {}
    try:
        GangParams(name=req.name, members=req.members, cpu=req.cpu, memory=req.memory, **extra)
    except ValidationError as e:
        for err in e.errors():
            key = str(err["loc"][0]) if err["loc"] else ""
            if key in extra:
                ignored[key] = f"refused by GangParams: {err['msg']}"
    takes = inspect.signature(plan).parameters
    for key in extra:
        if key not in ignored and key not in takes:
            ignored[key] = "GangParams knows it, extender.esl.gang.plan() does not take it"
    return {k: v for k, v in extra.items() if k not in ignored}, ignored


class PureGang:
    def __init__(
        self,
        policy: PolicyClient,
        pods: Pods,
        domain: str = "escher.io",
        manifest: Callable[..., dict[str, Any]] | None = None,
        on_event: Callable[[str, str], None] = lambda kind, gang: None,
        sleep: Callable[[float], None] = time.sleep,
        placeholders: bool = False,
    ) -> None:
        self.policy = policy
        self.pods = pods
        self.domain = domain
        self.manifest = manifest or pod_manifest
        self.on_event = on_event
        self.sleep = sleep
        self.placeholders = placeholders

    def run(self, req: GangRequest) -> GangResult:
        need = {
            CPU: amount(CPU, req.cpu, field="cpu"),
            MEMORY: amount(MEMORY, req.memory, field="memory"),
            PODS: 1,
        }
        end = time.monotonic() + req.deadline
        backoff = req.backoff
        extra, ignored = esl_params_used(req)
        result = GangResult(completed=False, ignored=ignored or None)
        while True:
            state = self.policy.cluster_state()
            if not plan(state, req.members, need, "capacity", **extra):
                result.reason = (
                    f"gang {req.name} can never fit: {req.members} members of cpu {req.cpu}, "
                    f"memory {req.memory}"
                )
                return result
            timeout = min(req.attempt_timeout, max(0.0, end - time.monotonic()))
            if self.placeholders:
                placement = self._hold(req, result.attempts + 1, timeout)
            else:
                placement = plan(state, req.members, need, "available", **extra)
            if placement:
                result.attempts += 1
                names = self._attempt(req, result.attempts, placement, timeout)
                if names:
                    result.completed, result.pods = True, names
                    return result
                result.rollbacks += 1
                self.on_event("rollback", req.name)
            elif self.placeholders:
                result.attempts += 1
                result.rollbacks += 1
                self.on_event("rollback", req.name)
            if time.monotonic() + backoff > end:
                result.reason = f"gang {req.name} did not complete within {req.deadline:g}s"
                return result
            self.sleep(backoff)
            backoff = min(backoff * 2, req.max_backoff)

    def _hold(self, req: GangRequest, attempt: int, timeout: float) -> dict[str, int]:
        """Placeholders hold the physical room: members per node where they all landed, or
        {} (and they are deleted) when they did not all bind in time."""
        names = [f"{req.name}-{attempt}-ph{i}" for i in range(req.members)]
        for n in names:
            self.pods.create(
                self.manifest(
                    n,
                    requests={CPU: req.cpu, MEMORY: req.memory},
                    labels={**(req.labels or {}), PLACEHOLDER_LABEL: req.name},
                )
            )
        if self.pods.bound(names, timeout) < req.members:
            self.pods.delete(names)
            return {}
        where = self.pods.nodes(names)
        self.pods.delete(names)  # the members replace them
        return dict(Counter(n for n in where.values() if n))

    def _attempt(
        self, req: GangRequest, attempt: int, placement: Mapping[str, int], timeout: float
    ) -> tuple[str, ...]:
        """One attempt on `placement`: the members' names once all are bound, or () after a
        rollback."""
        resource = f"gang-{req.name}"
        full = f"{self.domain}/{resource}"
        names = [f"{req.name}-{attempt}-{i}" for i in range(req.members)]
        for node, k in placement.items():
            self.policy.set_resource(resource, k, node=node)
        for n in names:
            self.pods.create(
                self.manifest(
                    n,
                    limits={full: "1"},
                    requests={CPU: req.cpu, MEMORY: req.memory},
                    labels=req.labels,
                    annotations=req.annotations,
                )
            )
        bound = self.pods.bound(names, timeout) == req.members
        if not bound:
            self.pods.delete(names)
        self.policy.delete_resource(resource, force=True)  # the bound pods keep their units
        return tuple(names) if bound else ()
