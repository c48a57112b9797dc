"""The ten gang-scheduling approaches the benchmark compares: each a cluster set-up on equal
footing, plus how to submit, start and delete one gang through the real API.

- extender: kube-scheduler + the ESCHER extender; gangs declared by labels (extender.gang).
- extender-gated: the same, with each member created behind the gang gate (`escher.io/gang`):
  the extender lets members through once their gang has places, so a gang that does not fit
  is not tried by kube-scheduler meanwhile.
- extender-adaptive: the same with deploy/'s adaptive gang gate: its admission policy gates
  new members only while the extender's switch says gangs wait for room.
- extender-marked: extender-adaptive with members created carrying their markers, as a job
  template that names them would: deploy/'s marker policy admits them untouched, so their
  creation pays no patch (split scope only; in every-pod scope it is extender-adaptive).
- pure: ESCHER's pure approach, planned from the cluster state (escher_harness.bench.puregang)
  on plain kube-scheduler.
- pure-ghost: the same with ESCHER's ghost tasks: placeholder pods hold the room first.
- dra: the pure runner (plan variant) unchanged, against the service in mode dra: the gang's
  resource is published as DRA devices (ResourceSlices, a DeviceClass mapping the extended
  resource name) and kube-scheduler's DynamicResources plugin allocates a device per member in
  a ResourceClaim per pod; kube-controller-manager (garbage collector, resource-claim
  controller) deletes the claims with their pods.
- default: plain kube-scheduler with no gang support: the members are just pods.
- coscheduling: scheduler-plugins' Coscheduling plugin in its own kube-scheduler build, with
  its PodGroup CRD (ESCHER's "FrameSpace": gang logic inside the scheduling framework).
- native: Kubernetes v1.37's own gang scheduling (beta: the GenericWorkload gate and
  scheduling.k8s.io/v1beta1 PodGroups; escher_harness.peers).

Every cluster gets the same Footing: nodes and their shape, kwok as the kubelets, one API
budget (clientConnection qps/burst) for whichever kube-scheduler runs and for the extender's
own client, and percentageOfNodesToScore. A gang's pods are created without a run time: the
job starts when the whole gang is bound (`start` then sets each member's run time, and kwok
makes it Succeeded that long after), as a real gang job waits at its rendezvous; members of
a gang never complete do not run and are deleted at the deadline.

Topology (the `topology` preset): the footing labels the nodes into zones, blocks and racks,
and a scenario may ask each gang for its level (escher_harness.bench.topology) as required or
preferred. The extender approaches carry it as the annotation `<domain>/gang-required-topology`
or `gang-preferred-topology` (the level's name); native, given the gate
TopologyAwareWorkloadScheduling on such a footing, as its PodGroup's
spec.schedulingConstraints.topology (required only: the API has no preference); pure as the
gang ESL parameter `required_topology` / `preferred_topology` (used if the ESL knows it);
Coscheduling and default have no topology.

Every gang is named `g<digits>` and its pods `<gang>-...`, so the recorder can tell a pod's
gang from its name alone, the same way for every approach. Called by the locustfile
(loadtests/gang_locustfile.py) and by escher_harness.bench.gang_bench.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml
from kubernetes import client

from escher_harness import localcluster
from escher_harness import peers as peer_gangs
from escher_harness.bench.loc import loc
from escher_harness.bench.puregang import GangRequest, PureGang
from escher_harness.bench.scenario import GangArrival
from escher_harness.localcluster.config import Scope, all_nodes_scheduler_name
from escher_harness.localcluster.cpus import CpuSplit, Side
from escher_harness.localcluster.fakenodes import Topology
from escher_harness.localcluster.kwok import RUN_TIME_ANNOTATION, format_run_time
from escher_harness.localcluster.paths import REPO_ROOT, cache_dir, scheduler_config_dir
from escher_harness.workload import Workload, pod_manifest
from extender.core.pod import Keys
from extender.esl.client import PolicyClient
from extender.gang.topology import DEFAULT, parse

REPO = REPO_ROOT
APPROACHES = (
    "extender",
    "extender-gated",
    "extender-adaptive",
    "extender-marked",
    "pure",
    "pure-ghost",
    "dra",
    "default",
    "coscheduling",
    "native",
)
_EXTENDER = ("extender", "extender-gated", "extender-adaptive", "extender-marked")
_ADAPTIVE = ("extender-adaptive", "extender-marked")
_PURE = ("pure", "pure-ghost")
# The approaches run by the pure runner through the policy API (escher_harness.bench.puregang).
POLICY = (*_PURE, "dra")
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


def cluster_spec(approach: str, dir: Path, footing: Footing) -> localcluster.ClusterSpec:
    common: dict[str, Any] = {
        "dir": dir,
        "nodes": footing.nodes,
        "node_cpu": footing.node_cpu,
        "node_memory": footing.node_memory,
        "kwok": True,
        "client_qps": footing.client_qps,
        "client_burst": footing.client_burst,
        "percentage_of_nodes_to_score": footing.percentage_of_nodes_to_score,
        "node_pods": str(footing.node_pods),
        "node_topology": footing.topology,
        "cpu_split": CpuSplit.halves(footing.cpu_split) if footing.cpu_split else None,
        "extender_nice": footing.extender_nice,
    }
    if approach in _EXTENDER:
        return localcluster.ClusterSpec(
            mode="extender",
            scope=footing.extender_scope,
            gang_gate=approach in _ADAPTIVE,
            **common,
        )
    if approach in _PURE:
        return localcluster.ClusterSpec(mode="pure", **common)
    if approach == "dra":
        return localcluster.ClusterSpec(mode="dra", **common)
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
            # On a topology footing, native runs with topology-aware workload scheduling in
            # every scenario (alike for all), and gangs that require a level say so.
            feature_gates=peer_gangs.NATIVE_TOPOLOGY_FEATURE_GATES
            if footing.topology
            else peer_gangs.NATIVE_FEATURE_GATES,
            runtime_config=peer_gangs.NATIVE_RUNTIME_CONFIG,
            **common,
        )
    raise ValueError(f"unknown approach {approach!r}; choose from {', '.join(APPROACHES)}")


def submit(approach: str, env: Env, job: GangJob) -> bool:
    """Submit `job` and return once it is complete (True) or given up (False)."""
    a = job.arrival
    if approach in POLICY:
        return _pure(env, job, placeholders=approach == "pure-ghost")
    if approach == "coscheduling":
        gang = peer_gangs.submit_coscheduling_gang(
            env.api,
            a.name,
            size=a.size,
            min_member=a.size,
            cpu=a.cpu,
            memory=a.memory,
            schedule_timeout_seconds=max(1, round(job.deadline)),
        )
        env.on_event("created", a.name)
        env.pods[a.name] = gang.pods
    elif approach == "native":
        gang = peer_gangs.submit_native_gang(
            env.api,
            a.name,
            size=a.size,
            min_member=a.size,
            cpu=a.cpu,
            memory=a.memory,
            topology_key=job.level_key() if job.topology == "required" else None,
        )
        env.on_event("created", a.name)
        env.pods[a.name] = gang.pods
    else:
        labels, annotations = {}, {}
        gates: tuple[str, ...] = ()
        limits: dict[str, str] | None = None
        scheduler = env.info.scheduler_name
        if approach in _EXTENDER:
            domain = env.info.resource_domain
            labels = {f"{domain}/gang": a.name}
            annotations = {
                f"{domain}/gang-min": str(a.size),
                f"{domain}/gang-timeout": f"{job.deadline:g}",
            }
            if job.topology and job.level:
                keys = Keys.for_domain(domain)
                key = (
                    keys.gang_required_topology
                    if job.topology == "required"
                    else keys.gang_preferred_topology
                )
                annotations[key] = job.level
            if approach == "extender-gated":
                gates = (f"{domain}/gang",)
            if approach == "extender-marked":
                keys = Keys.for_domain(domain)
                limits = dict.fromkeys((keys.gang_marker, keys.bind_marker), "0")
                # Marked and on the profile that looks at every node: the policy skips it.
                scheduler = env.marked_scheduler_name
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
                    scheduler_name=scheduler,
                )
            )
        env.on_event("created", a.name)
        env.pods[a.name] = names
    return env.watch.bound(env.pods[a.name], job.deadline) == a.size


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


def delete(approach: str, env: Env, job: GangJob) -> None:
    pods = env.pods.pop(job.name, ())
    gang = peer_gangs.Gang(job.name, "default", pods, job.arrival.size)
    if approach == "coscheduling":
        peer_gangs.delete_coscheduling_gang(env.api, gang)
    elif approach == "native":
        peer_gangs.delete_native_gang(env.api, gang)
    else:
        Workload(env.api).delete(pods)


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


def _pure(env: Env, job: GangJob, placeholders: bool) -> bool:
    assert env.policy is not None, "the pure approaches need the extender's policy API"
    a = job.arrival
    esl = PureGang(
        env.policy,
        _PurePods(env, a.name),
        env.info.resource_domain,
        on_event=env.on_event,
        placeholders=placeholders,
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


def policy_loc() -> dict[str, int | None]:
    """Lines of gang policy code per approach: non-blank, non-comment lines of the files
    that implement the gang logic (the peers' from the Go module cache, when present)."""
    mod = cache_dir() / "go" / "mod"
    pure = [
        REPO / "extender" / "esl" / "gang.py",
        REPO / "harness" / "escher_harness" / "bench" / "puregang.py",
    ]
    extender = [
        *sorted((REPO / "extender" / "gang").glob("*.py")),
        REPO / "extender" / "filters" / "reservation.py",
    ]
    adaptive = [
        *extender,
        REPO / "extender" / "gang" / "kube" / "lifter.py",
        REPO / "extender" / "gang" / "kube" / "gateswitch.py",
    ]
    files: dict[str, list[Path]] = {
        # The gang feature's folder and the filter that keeps others off reserved places;
        # gated, also the adapter that lifts the gate, and adaptive, the switch's.
        "extender": extender,
        "extender-gated": [*extender, REPO / "extender" / "gang" / "kube" / "lifter.py"],
        "extender-adaptive": adaptive,
        "extender-marked": adaptive,
        # The gang ESL, and the runner that creates, replaces and deletes the pods (both
        # variants live in the same runner, so they count the same lines).
        "pure": pure,
        "pure-ghost": pure,
        "dra": pure,
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
