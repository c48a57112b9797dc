"""The native approach: Kubernetes v1.37's own gang scheduling (beta: the GenericWorkload
gate and scheduling.k8s.io/v1beta1 PodGroups; escher_harness.peers).

On a topology footing, native runs with topology-aware workload scheduling in every
scenario (alike for all), and a gang that requires a level says so in its PodGroup's
spec.schedulingConstraints.topology (required only: the API has no preference). Its row is
in escher_harness.bench.approaches.registry.
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


@dataclass(frozen=True)
class Native(Approach):
    def cluster_spec(self, dir: Path, footing: Footing) -> localcluster.ClusterSpec:
        return footing.cluster_spec(
            dir,
            mode="none",
            scheduler_config=scheduler_config_dir() / "native.yaml",
            feature_gates=peer_gangs.NATIVE_TOPOLOGY_FEATURE_GATES
            if footing.topology
            else peer_gangs.NATIVE_FEATURE_GATES,
            runtime_config=peer_gangs.NATIVE_RUNTIME_CONFIG,
        )

    def submit(self, env: Env, job: GangJob) -> bool:
        a = job.arrival
        gang = peer_gangs.submit_native_gang(
            env.api,
            a.name,
            size=a.size,
            min_member=a.size,
            cpu=a.cpu,
            memory=a.memory,
            topology_key=job.level_key() if job.topology == "required" else None,
        )
        return created(env, job, gang.pods)

    def delete(self, env: Env, job: GangJob) -> None:
        peer_gangs.delete_native_gang(env.api, peer_gang(env, job))

    def code(self) -> list[Path] | None:
        mod = cache_dir() / "go" / "mod"
        return go_files(
            mod.glob("k8s.io/kubernetes@*/pkg/scheduler/framework/plugins/gangscheduling/*.go")
        )
