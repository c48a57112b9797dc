"""The default approach: plain kube-scheduler with no gang support; the members are just
pods (the baseline). No topology. Its row is in escher_harness.bench.approaches.registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from escher_harness import localcluster
from escher_harness.bench.approaches.base import Approach, Env, Footing, GangJob, create_members


@dataclass(frozen=True)
class Default(Approach):
    def cluster_spec(self, dir: Path, footing: Footing) -> localcluster.ClusterSpec:
        return footing.cluster_spec(dir, mode="none")

    def submit(self, env: Env, job: GangJob) -> bool:
        return create_members(env, job)

    def code(self) -> list[Path]:
        return []
