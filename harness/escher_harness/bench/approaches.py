"""The five gang-scheduling approaches the benchmark compares, each a cluster set-up plus a
way to submit and delete one gang through the real API.

- extender: kube-scheduler + the ESCHER extender; gangs declared by labels (extender.gang).
- pure: ESCHER's pure approach; the pure gang runner (escher_harness.bench.puregang) on
  plain kube-scheduler.
- default: plain kube-scheduler with no gang support: the members are just pods.
- coscheduling: scheduler-plugins' Coscheduling plugin in its own kube-scheduler build, with
  its PodGroup CRD (ESCHER's "FrameSpace": gang logic inside the scheduling framework).
- native: Kubernetes v1.37's own gang scheduling (beta: the GenericWorkload gate and
  scheduling.k8s.io/v1beta1 PodGroups; escher_harness.peers).

Every gang is named `g<digits>` and its pods `<gang>-...`, so the trace recorder can tell a
pod's gang from its name alone, the same way for every approach. Called by the locustfile
(loadtests/gang_locustfile.py) and by escher_harness.bench.gang_bench.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kubernetes import client

from escher_harness import localcluster
from escher_harness import peers as peer_gangs
from escher_harness.bench.loc import loc
from escher_harness.bench.puregang import GangRequest, PureGang
from escher_harness.localcluster.paths import REPO_ROOT, cache_dir, scheduler_config_dir
from escher_harness.workload import Workload, pod_manifest
from extender.esl.client import PolicyClient

REPO = REPO_ROOT
APPROACHES = ("extender", "pure", "default", "coscheduling", "native")


@dataclass(frozen=True)
class GangJob:
    name: str
    size: int
    cpu: str
    memory: str
    deadline: float  # seconds to complete before the gang is given up
    attempt_timeout: float  # pure approach: per attempt


class Waiter(Protocol):
    def wait(self, gang: str, size: int, timeout: float) -> bool: ...


@dataclass
class Env:
    """What a running approach needs: the cluster, API access, and the bound-pod waiter."""

    info: localcluster.ClusterInfo
    api: client.ApiClient
    waiter: Waiter
    on_event: Callable[[str, str], None]
    pods: dict[str, tuple[str, ...]] = field(default_factory=dict)  # gang -> its pods


def cluster_spec(
    approach: str, dir: Path, nodes: int, cpu: str, memory: str
) -> localcluster.ClusterSpec:
    common: dict[str, Any] = {"dir": dir, "nodes": nodes, "node_cpu": cpu, "node_memory": memory}
    if approach == "extender":
        return localcluster.ClusterSpec(mode="extender", **common)
    if approach == "pure":
        return localcluster.ClusterSpec(mode="pure", **common)
    if approach == "default":
        return localcluster.ClusterSpec(mode="none", **common)
    if approach == "coscheduling":
        return localcluster.ClusterSpec(
            mode="none",
            scheduler_binary=cache_dir() / "bin" / "kube-scheduler-plugins",
            scheduler_config=scheduler_config_dir() / "coscheduling.yaml",
            manifests=tuple(sorted((cache_dir() / "peers").glob("*.yaml"))),
            **common,
        )
    if approach == "native":
        return localcluster.ClusterSpec(
            mode="none",
            scheduler_config=scheduler_config_dir() / "native.yaml",
            feature_gates=peer_gangs.NATIVE_FEATURE_GATES,
            runtime_config=peer_gangs.NATIVE_RUNTIME_CONFIG,
            **common,
        )
    raise ValueError(f"unknown approach {approach!r}; choose from {', '.join(APPROACHES)}")


def submit(approach: str, env: Env, job: GangJob) -> bool:
    """Submit `job` and return once it is complete (True) or given up (False)."""
    work = Workload(env.api)
    if approach == "pure":
        return _pure(env, work, job)
    if approach == "coscheduling":
        gang = peer_gangs.submit_coscheduling_gang(
            env.api,
            job.name,
            size=job.size,
            min_member=job.size,
            cpu=job.cpu,
            memory=job.memory,
            schedule_timeout_seconds=int(job.deadline),
        )
        env.pods[job.name] = gang.pods
    elif approach == "native":
        gang = peer_gangs.submit_native_gang(
            env.api,
            job.name,
            size=job.size,
            min_member=job.size,
            cpu=job.cpu,
            memory=job.memory,
        )
        env.pods[job.name] = gang.pods
    else:
        labels, annotations = {}, {}
        if approach == "extender":
            domain = env.info.resource_domain
            labels = {f"{domain}/gang": job.name}
            annotations = {
                f"{domain}/gang-min": str(job.size),
                f"{domain}/gang-timeout": f"{job.deadline:g}",
            }
        names = tuple(f"{job.name}-{i}" for i in range(job.size))
        for n in names:
            work.create(
                pod_manifest(
                    n,
                    requests={"cpu": job.cpu, "memory": job.memory},
                    labels=labels,
                    annotations=annotations,
                )
            )
        env.pods[job.name] = names
    return env.waiter.wait(job.name, job.size, job.deadline)


def delete(approach: str, env: Env, job: GangJob) -> None:
    pods = env.pods.pop(job.name, ())
    gang = peer_gangs.Gang(job.name, "default", pods, job.size)
    if approach == "coscheduling":
        peer_gangs.delete_coscheduling_gang(env.api, gang)
    elif approach == "native":
        peer_gangs.delete_native_gang(env.api, gang)
    else:
        Workload(env.api).delete(pods)


class _WaiterPods:
    """The pure ESL's Pods, answered from the run's watch rather than by polling."""

    def __init__(self, work: Workload, env: Env, gang: str) -> None:
        self.work, self.env, self.gang = work, env, gang

    def create(self, manifest: Any) -> None:
        self.work.create(manifest)
        self.env.pods[self.gang] = (*self.env.pods.get(self.gang, ()), manifest["metadata"]["name"])

    def delete(self, names: Any) -> None:
        self.work.delete(names)
        self.env.pods[self.gang] = tuple(p for p in self.env.pods[self.gang] if p not in names)

    def bound(self, names: Any, timeout: float) -> int:
        return len(names) if self.env.waiter.wait(self.gang, len(names), timeout) else 0

    def nodes(self, names: Any) -> dict[str, str | None]:
        return self.work.nodes(names)


def _pure(env: Env, work: Workload, job: GangJob) -> bool:
    assert env.info.extender_url is not None
    with PolicyClient(env.info.extender_url, env.info.token) as policy:
        esl = PureGang(
            policy,
            _WaiterPods(work, env, job.name),
            env.info.resource_domain,
            on_event=env.on_event,
        )
        r = esl.run(
            GangRequest(
                job.name,
                job.size,
                cpu=job.cpu,
                memory=job.memory,
                attempt_timeout=job.attempt_timeout,
                deadline=job.deadline,
            )
        )
    return r.completed


def policy_loc() -> dict[str, int | None]:
    """Lines of gang policy code per approach: non-blank, non-comment lines of the files
    that implement the gang logic (the peers' from the Go module cache, when present)."""
    mod = cache_dir() / "go" / "mod"
    files: dict[str, list[Path]] = {
        # The gang feature's folder and the filter that keeps others off reserved places.
        "extender": [
            *sorted((REPO / "extender" / "gang").glob("*.py")),
            REPO / "extender" / "filters" / "reservation.py",
        ],
        # The gang ESL, and the runner that creates, replaces and deletes the pods.
        "pure": [
            REPO / "extender" / "esl" / "gang.py",
            REPO / "harness" / "escher_harness" / "bench" / "puregang.py",
        ],
        "default": [],
        "coscheduling": sorted(
            mod.glob("sigs.k8s.io/scheduler-plugins@*/pkg/coscheduling/**/*.go")
        ),
        "native": sorted(
            mod.glob("k8s.io/kubernetes@*/pkg/scheduler/framework/plugins/gangscheduling/*.go")
        ),
    }
    out: dict[str, int | None] = {}
    for approach, paths in files.items():
        paths = [p for p in paths if not p.name.endswith("_test.go")]
        if approach in ("coscheduling", "native") and not paths:
            out[approach] = None
            continue
        out[approach] = sum(loc(p) for p in paths)
    return out
