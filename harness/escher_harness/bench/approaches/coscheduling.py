"""The coscheduling approach: scheduler-plugins' Coscheduling plugin in its own
kube-scheduler build, with its PodGroup CRD (ESCHER's "FrameSpace": gang logic inside the
scheduling framework; escher_harness.peers). No topology. Its row is in
escher_harness.bench.approaches.registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from escher_harness import localcluster
from escher_harness import peers as peer_gangs
from escher_harness.bench.approaches.base import (
    Approach,
    Env,
    Footing,
    GangJob,
    created,
    go_files,
    peer_gang,
)
from escher_harness.localcluster.paths import cache_dir, scheduler_config_dir


def _binary() -> Path:
    return cache_dir() / "bin" / "kube-scheduler-plugins"


def _manifests() -> tuple[Path, ...]:
    return tuple(sorted((cache_dir() / "peers").glob("*.yaml")))


@dataclass(frozen=True)
class Coscheduling(Approach):
    def cluster_spec(self, dir: Path, footing: Footing) -> localcluster.ClusterSpec:
        return footing.cluster_spec(
            dir,
            mode="none",
            scheduler_binary=_binary(),
            scheduler_config=scheduler_config_dir() / "coscheduling.yaml",
            manifests=_manifests(),
        )

    def submit(self, env: Env, job: GangJob) -> bool:
        a = job.arrival
        gang = peer_gangs.submit_coscheduling_gang(
            env.api,
            a.name,
            size=a.size,
            min_member=a.size,
            cpu=a.cpu,
            memory=a.memory,
            schedule_timeout_seconds=max(1, round(job.deadline)),
        )
        return created(env, job, gang.pods)

    def delete(self, env: Env, job: GangJob) -> None:
        peer_gangs.delete_coscheduling_gang(env.api, peer_gang(env, job))

    def code(self) -> list[Path] | None:
        mod = cache_dir() / "go" / "mod"
        return go_files(mod.glob("sigs.k8s.io/scheduler-plugins@*/pkg/coscheduling/**/*.go"))

    def unavailable(self) -> str | None:
        if not _binary().exists() or not _manifests():
            return "kube-scheduler-plugins or its PodGroup CRD is not built: run `make peers`"
        return None
