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

Topology: a request's `required_topology` / `preferred_topology` (a level's name or node-label
key) are the gang ESL's parameters of the same names (extender.esl.domains places them).

Either way, if the gang is not fully bound within the attempt timeout, the attempt is rolled
back (its pods and its resource deleted) and retried after an exponential backoff; once the
gang is complete its resource is removed (the pods stay bound).

What neither can do, as the ESCHER paper admits: there is no transaction, so between a plan
(or a placeholder's deletion) and the members binding, other pods can take the room; the
attempt then times out and rolls back. Placeholders narrow that window to the replacement.

Topology (`required_topology`, `preferred_topology`, as the gang ESL's params): the plan
chooses nodes by domain as the ESL does (extender.esl.domains). kube-scheduler would place
placeholders anywhere, so with a required level the runner first chooses the domain from
the cluster state (the best fit) and gives the placeholders a nodeSelector on it; a
preferred level is not passed to them (kube-scheduler has no "fewest domains" to honour).
Called by the gang benchmark (escher_harness.bench.approaches.pure) and the e2e tests.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from escher_harness.workload import pod_manifest
from extender.core.names import CPU, MEMORY, PODS
from extender.core.quantity import amount
from extender.esl import domains
from extender.esl.client import PolicyClient
from extender.gang import topology
from extender.gang.topology import Hierarchy, Level

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
    required_topology: str | None = None  # a level's name or node-label key
    preferred_topology: str | None = None


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
        placeholders: bool = False,
        hierarchy: Hierarchy | None = None,  # the service's --gang-topology
    ) -> None:
        self.policy = policy
        self.hierarchy = hierarchy or topology.parse(topology.DEFAULT)
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
        result = GangResult(completed=False)
        required, preferred = (
            self._level(v) for v in (req.required_topology, req.preferred_topology)
        )

        def fit(state: Any, use: str) -> domains.Fit:
            return domains.place(state, req.members, need, use, required, preferred)

        while True:
            state = self.policy.cluster_state()
            ever = fit(state, "capacity")
            if not ever.placed:
                result.reason = f"gang {req.name} can never fit: " + (
                    ever.why or f"{req.members} members of cpu {req.cpu}, memory {req.memory}"
                )
                return result
            timeout = min(req.attempt_timeout, max(0.0, end - time.monotonic()))
            if not self.placeholders:
                placement = fit(state, "available").placed
            elif required is None:
                placement = self._hold(req, result.attempts + 1, timeout, None)
            elif chosen := fit(state, "available").placed:
                # Only the domain is kept: kube-scheduler finds the nodes in it.
                where = {required.key: state.labels[next(iter(chosen))][required.key]}
                placement = self._hold(req, result.attempts + 1, timeout, where)
            else:
                placement = {}  # no domain has room now: a rollback with nothing to undo
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

    def _level(self, value: str | None) -> Level | None:
        if value is None:
            return None
        level = self.hierarchy.resolve(value)
        if level is None:
            raise ValueError(f"{value!r} is neither a topology level ({self.hierarchy.names()})")
        return level

    def _hold(
        self, req: GangRequest, attempt: int, timeout: float, selector: Mapping[str, str] | None
    ) -> dict[str, int]:
        """Placeholders hold the physical room (in the domain `selector` selects, if given):
        members per node where they all landed, or {} (and they are deleted) when they did
        not all bind in time."""
        names = [f"{req.name}-{attempt}-ph{i}" for i in range(req.members)]
        for n in names:
            manifest = self.manifest(
                n,
                requests={CPU: req.cpu, MEMORY: req.memory},
                labels={**(req.labels or {}), PLACEHOLDER_LABEL: req.name},
            )
            if selector:
                manifest["spec"]["nodeSelector"] = {
                    **manifest["spec"].get("nodeSelector", {}),
                    **selector,
                }
            self.pods.create(manifest)
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
        self.on_event("created", req.name)
        bound = self.pods.bound(names, timeout) == req.members
        if not bound:
            self.pods.delete(names)
        self.policy.delete_resource(resource, force=True)  # the bound pods keep their units
        return tuple(names) if bound else ()
