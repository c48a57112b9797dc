"""What every gang-scheduling approach of the benchmark shares: the equal footing of its
cluster, a gang job, the run's environment, the Approach each module implements, and the
steps alike for all (creating plain member pods, waiting for the gang bound, starting its
job, deleting its pods).

Every cluster gets the same Footing: nodes and their shape, kwok as the kubelets, one API
budget (clientConnection qps/burst) for whichever kube-scheduler runs and for the extender's
own client, and percentageOfNodesToScore. A gang's pods are created without a run time: the
job starts when the whole gang is bound (`start` then sets each member's run time, and kwok
makes it Succeeded that long after), as a real gang job waits at its rendezvous; members of
a gang never complete do not run and are deleted at the deadline.

Used by the approach modules of this package and, through the package, by the gang
benchmark, the gang timeline and the locustfile.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml
from kubernetes import client

from escher_harness import localcluster
from escher_harness import peers as peer_gangs
from escher_harness.bench.scenario import GangArrival
from escher_harness.localcluster.config import Scope, all_nodes_scheduler_name
from escher_harness.localcluster.cpus import CpuSplit, Side
from escher_harness.localcluster.fakenodes import Topology
from escher_harness.localcluster.kwok import RUN_TIME_ANNOTATION, format_run_time
from escher_harness.workload import Workload, pod_manifest
from extender.esl.client import PolicyClient
from extender.gang.topology import DEFAULT, parse

_HIERARCHY = parse(DEFAULT)


@dataclass(frozen=True)
class Footing:
    """What every approach's cluster has alike."""

    nodes: int
    node_cpu: str
    node_memory: str
    # clientConnection.qps/burst of every kube-scheduler, and the extender's own client:
    # high enough that no token bucket decides a result.
    client_qps: float = 1000.0
    client_burst: int = 2000
    # kube-scheduler's percentageOfNodesToScore: None, each approach as it ships (the peers
    # and pure kube-scheduler's adaptive default; the extender's profiles as deploy/'s:
    # escher_harness.bench.sampling); a number equalises it for every approach.
    percentage_of_nodes_to_score: int | None = None
    node_pods: int = 110
    # Nodes labelled into zones, blocks and racks (None: no topology labels).
    topology: Topology | None = None
    # How the extender approaches' kube-scheduler calls the extender (the others ignore it):
    # "split", as deploy/ runs it (gang members marked at creation; filter over the verbs'
    # HTTP/1.1 listener, bind over HTTP/2), or "every-pod" (every pod every exchange over
    # HTTP/2, as every gang campaign before this field existed was measured).
    extender_scope: Scope = "split"
    # kube-scheduler and the extender ("scheduling"), or the extender alone ("extender"), on
    # CPUs of their own, apart from the API server and the load generator
    # (escher_harness.localcluster.cpus); None: all share every CPU.
    cpu_split: Side | None = None
    # The extender's CPU share, as its CPU request would set it: its session's autogroup
    # nice (escher_harness.localcluster.processes.set_autogroup_nice); 0: the same share as
    # every other process. Approaches without an extender have nothing it applies to.
    extender_nice: int = 0

    def cluster_spec(self, dir: Path, **approach: Any) -> localcluster.ClusterSpec:
        """The cluster of an approach on this footing: `approach` adds its own fields."""
        return localcluster.ClusterSpec(
            dir=dir,
            nodes=self.nodes,
            node_cpu=self.node_cpu,
            node_memory=self.node_memory,
            kwok=True,
            client_qps=self.client_qps,
            client_burst=self.client_burst,
            percentage_of_nodes_to_score=self.percentage_of_nodes_to_score,
            node_pods=str(self.node_pods),
            node_topology=self.topology,
            cpu_split=CpuSplit.halves(self.cpu_split) if self.cpu_split else None,
            extender_nice=self.extender_nice,
            **approach,
        )


@dataclass(frozen=True)
class GangJob:
    arrival: GangArrival
    deadline: float  # seconds to complete before the gang is given up
    attempt_timeout: float  # pure approaches: per attempt
    topology: str = ""  # "", "required" or "preferred"
    level: str | None = None  # the level (name) it requires or prefers

    @property
    def name(self) -> str:
        return self.arrival.name

    def level_key(self) -> str | None:
        """The node label of the gang's level, when it asks for one."""
        if not self.topology or not self.level:
            return None
        level = _HIERARCHY.resolve(self.level)
        return level.key if level else None


class Pods(Protocol):
    """What the approaches need of the run's pod watch (the locustfile's Recorder)."""

    def bound(self, names: Sequence[str], timeout: float) -> int: ...

    def nodes(self, names: Sequence[str]) -> dict[str, str | None]: ...

    def pods_of(self, gang: str) -> list[str]: ...


@dataclass
class Env:
    """What a running approach needs: the cluster, API access, the pod watch, and the
    policy client of the pure approaches (one per run, as an application would keep)."""

    info: localcluster.ClusterInfo
    api: client.ApiClient
    watch: Pods
    on_event: Callable[[str, str], None]
    policy: PolicyClient | None = None
    pods: dict[str, tuple[str, ...]] = field(default_factory=dict)  # gang -> its pods now
    # What the run noticed for the report, e.g. the pure runner's ignored ESL parameters.
    notes: dict[str, str] = field(default_factory=dict)

    @functools.cached_property
    def marked_scheduler_name(self) -> str:
        """The schedulerName of a pod created with its markers: the profile that looks at
        every node, where the cluster has one (split scope), so the marker policy skips it."""
        path = self.info.paths.get("scheduler_config")
        config = yaml.safe_load(path.read_text()) if path is not None else None
        names = {p.get("schedulerName") for p in (config or {}).get("profiles") or []}
        wanted = all_nodes_scheduler_name(self.info.scheduler_name)
        return wanted if wanted in names else self.info.scheduler_name


class Approach(abc.ABC):
    """One way of scheduling gangs: its cluster on the footing, how it submits a gang and
    deletes it, and the files of its gang logic. A module of this package implements it; a
    row of escher_harness.bench.approaches.registry names it."""

    # Whether it runs through the extender's policy API (the locustfile opens a client).
    uses_policy = False

    @abc.abstractmethod
    def cluster_spec(self, dir: Path, footing: Footing) -> localcluster.ClusterSpec: ...

    def started(self, info: localcluster.ClusterInfo, footing: Footing) -> localcluster.ClusterInfo:
        """What runs beside the cluster once it is up (kueue-tas: Kueue), made its components
        so that their CPU is counted and `down` stops them; the cluster as it is by default."""
        del footing
        return info

    @abc.abstractmethod
    def submit(self, env: Env, job: GangJob) -> bool:
        """Submit `job` and return once it is complete (True) or given up (False)."""

    def delete(self, env: Env, job: GangJob) -> None:
        Workload(env.api).delete(env.pods.pop(job.name, ()))

    @abc.abstractmethod
    def code(self) -> list[Path] | None:
        """The files of its gang logic, for the lines-of-policy count (None: not here)."""

    def unavailable(self) -> str | None:
        """Why it cannot run on this machine, or None."""
        return None


def created(env: Env, job: GangJob, pods: tuple[str, ...]) -> bool:
    """The gang's pods exist: say so, remember them, and wait for all bound."""
    env.on_event("created", job.name)
    env.pods[job.name] = pods
    return env.watch.bound(pods, job.deadline) == job.arrival.size


def create_members(
    env: Env,
    job: GangJob,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    gates: tuple[str, ...] = (),
    limits: dict[str, str] | None = None,
    scheduler: str | None = None,
) -> bool:
    """Create the gang's members as plain pods, one at a time, and wait for all bound."""
    a = job.arrival
    names = tuple(f"{a.name}-{i}" for i in range(a.size))
    work = Workload(env.api)
    for n in names:
        work.create(
            pod_manifest(
                n,
                requests={"cpu": a.cpu, "memory": a.memory},
                limits=limits,
                labels=labels,
                annotations=annotations,
                scheduling_gates=gates,
                scheduler_name=scheduler or env.info.scheduler_name,
            )
        )
    return created(env, job, names)


def start(env: Env, job: GangJob) -> tuple[str, ...]:
    """The whole gang is bound: its job starts. Each member gets its run time (one patch
    per member, the same for every approach); kwok makes it Succeeded that long after."""
    core = client.CoreV1Api(env.api)
    patch = {
        "metadata": {"annotations": {RUN_TIME_ANNOTATION: format_run_time(job.arrival.run_time)}}
    }
    members = env.pods.get(job.name, ())
    for name in members:
        core.patch_namespaced_pod(name, "default", patch)
    return members


def peer_gang(env: Env, job: GangJob) -> peer_gangs.Gang:
    """The peer's gang of `job`, its pods no longer remembered: to delete it."""
    return peer_gangs.Gang(job.name, "default", env.pods.pop(job.name, ()), job.arrival.size)


def go_files(paths: Iterable[Path]) -> list[Path] | None:
    """A Go package's files but its tests, from the Go module cache (None: not there)."""
    found = [p for p in sorted(paths) if not p.name.endswith("_test.go")]
    return found or None
