"""The pure approaches: ESCHER's pure gang runner (escher_harness.bench.puregang), planned
from the cluster state through the extender's policy API, on plain kube-scheduler.

- pure: the runner as it is.
- pure-ghost: the same with ESCHER's ghost tasks: placeholder pods hold the room first.
- dra: the runner (plan variant) unchanged, against the service in mode dra: the gang's
  resource is published as DRA devices (ResourceSlices, a DeviceClass mapping the extended
  resource name) and kube-scheduler's DynamicResources plugin allocates a device per member
  in a ResourceClaim per pod; kube-controller-manager (garbage collector, resource-claim
  controller) deletes the claims with their pods.

A gang asking for a topology level passes it as the gang ESL parameter `required_topology`
or `preferred_topology` (used if the ESL knows it). Rows in
escher_harness.bench.approaches.registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from escher_harness import localcluster
from escher_harness.bench.approaches.base import Approach, Env, Footing, GangJob
from escher_harness.bench.puregang import GangRequest, PureGang
from escher_harness.localcluster.paths import REPO_ROOT
from escher_harness.workload import Workload


@dataclass(frozen=True)
class Pure(Approach):
    mode: Literal["pure", "dra"]
    placeholders: bool = False  # ghost tasks

    uses_policy = True

    def cluster_spec(self, dir: Path, footing: Footing) -> localcluster.ClusterSpec:
        return footing.cluster_spec(dir, mode=self.mode)

    def submit(self, env: Env, job: GangJob) -> bool:
        assert env.policy is not None, "the pure approaches need the extender's policy API"
        a = job.arrival
        esl = PureGang(
            env.policy,
            _PurePods(env, a.name),
            env.info.resource_domain,
            on_event=env.on_event,
            placeholders=self.placeholders,
        )
        r = esl.run(
            GangRequest(
                a.name,
                a.size,
                cpu=a.cpu,
                memory=a.memory,
                attempt_timeout=job.attempt_timeout,
                deadline=job.deadline,
                required_topology=job.level if job.topology == "required" else None,
                preferred_topology=job.level if job.topology == "preferred" else None,
            )
        )
        return r.completed

    def code(self) -> list[Path]:
        """The gang ESL, and the runner that creates, replaces and deletes the pods (every
        variant lives in the same runner, so they count the same lines)."""
        return [
            REPO_ROOT / "extender" / "esl" / "gang.py",
            REPO_ROOT / "harness" / "escher_harness" / "bench" / "puregang.py",
        ]


class _PurePods:
    """The pure runner's Pods: creations and deletions go to the API and are remembered in
    env.pods; binding is answered from the run's watch rather than by polling."""

    def __init__(self, env: Env, gang: str) -> None:
        self.work, self.env, self.gang = Workload(env.api), env, gang

    def create(self, manifest: Any) -> None:
        self.work.create(manifest)
        self.env.pods[self.gang] = (*self.env.pods.get(self.gang, ()), manifest["metadata"]["name"])

    def delete(self, names: Any) -> None:
        self.work.delete(names)
        self.env.pods[self.gang] = tuple(p for p in self.env.pods[self.gang] if p not in names)

    def bound(self, names: Any, timeout: float) -> int:
        return self.env.watch.bound(names, timeout)

    def nodes(self, names: Any) -> dict[str, str | None]:
        return self.env.watch.nodes(names)
