"""kube-scheduler's scheduling throughput (pods/s) on the local control plane, in one mode.

One run starts the real control plane (kwok off: bound pods stay Pending, so nothing but
scheduling is measured) with every scheduler and the extender on the same API budget, each
mode sampling nodes as it ships unless the benchmark equalises `percentageOfNodesToScore`
(escher_harness.bench.sampling), warms it up, and then for each workload:

1. stops kube-scheduler and creates all the pods, so pod creation does not pace scheduling;
2. starts kube-scheduler again (its metrics start from zero) and records when each pod is
   first seen bound;
3. reads throughput over the middle of the bind window (from the 10th to the 90th percentile
   bind, so neither the scheduler's start-up nor the last stragglers count), kube-scheduler's
   own cycle metrics, the extender's server-side verb latency, the CPU time each component
   used per pod, the API server's binding latency, the API writes per pod (kube-apiserver's
   `apiserver_request_total` for POST, PUT, PATCH, DELETE and APPLY over the window, by verb
   and resource, leases left out: escher_harness.bench.apimetrics), and whether any node went
   over capacity (mode dra: also any node holding more claimed devices of a resource than it
   publishes, escher_harness.bench.dracheck).

Workloads, one per pod class: `plain` pods (cpu and memory only: in extender mode they take
the extender's fast path, split they go through no exchange), `ephemeral` pods (one unit each
of a resource set on every node; modes pure and extender: split, no exchange either) and
`prefer` pods (ephemeral, with an `escher.io/pack` preference: split, only prioritize) and
`gang` members (gangs of GANG_SIZE consecutive pods, all-or-nothing: split, filter and bind,
the barrier; in mode none, kube-scheduler alone places the same pods as if they were plain,
which is the baseline of what gangs cost).

Mode `dra` is pure's construction with the resources published as DRA devices (ResourceSlices,
a DeviceClass with `extendedResourceName`): the pods are the same, kube-scheduler's
DynamicResources plugin allocates a device per unit in a ResourceClaim per pod (about 7 API
writes per pod where a Node-status resource costs 2), and kube-controller-manager (garbage
collector, resource-claim controller) runs beside it; its CPU is reported as its own process.
Nothing reads `prefer`'s preference without the extender, in dra as in pure.

Then, with Setup.wake_trials, the set_resource-to-schedulable trials on the same cluster
(escher_harness.bench.wake). Called by escher_harness.bench.extender_bench, once per mode, size
and repetition.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Final, Literal

import httpx
from kubernetes import client

from escher_harness import localcluster
from escher_harness.bench import apimetrics, dracheck, environment, profile, promhist, wake
from escher_harness.bench.extender_summary import COMPONENTS
from escher_harness.kubeclient import api_client
from escher_harness.localcluster.config import DEFAULT_RESOURCE_DOMAIN
from escher_harness.localcluster.config import Mode as ClusterMode
from escher_harness.localcluster.processes import ProcessRecord, cpu_seconds
from escher_harness.workload import Workload, pod_manifest
from extender.core import quantity
from extender.core.pod import MARKER_CAPACITY, Keys
from extender.esl.client import PolicyClient

Mode = Literal[
    "none",
    "none-markers",
    "pure",
    "extender",
    "extender-http",
    "extender-split",
    "extender-split-h2",
    "extender-split-h1",
    "extender-split-http",
    "dra",
]
Kind = Literal["plain", "ephemeral", "prefer", "gang"]
# The default comparison, each as it ships: kube-scheduler alone, pure, and the extender as
# deploy/ runs it (extender-split); `extender`, every pod every exchange, is an option.
MODES: Final[tuple[Mode, ...]] = ("none", "pure", "extender-split")
# extender-http: extender mode with kube-scheduler calling the verbs over plain HTTP on loopback
# instead of mutual TLS (what deploy/ and the embedded cluster run), to measure what TLS costs.
# extender-split: extender mode as deploy/ runs it (ClusterSpec.split): each exchange only for
# the pods marked for it by deploy's admission policy; here only `prefer` pods get one. Its
# filter and prioritize entries call the verbs' HTTP/1.1 listener, bind the HTTP/2 one.
# extender-split-h2: the same with every entry on the HTTP/2 listener (the layout before).
# extender-split-h1: the same with every verb over mutual TLS and HTTP/1.1 (uvicorn).
# extender-split-http: the same over plain HTTP/1.1 on loopback, as deploy/'s sidecar overlay
# runs it (the extender a container of kube-scheduler's pod: no TLS, no Service).
# none-markers: kube-scheduler alone, its nodes advertising the extender's two markers as the
# write-back does in extender mode (extender.core.pod.MARKER_CAPACITY each): what the markers
# alone cost kube-scheduler, with no extender process beside it.
ALL_MODES: Final[tuple[Mode, ...]] = (
    *MODES,
    "none-markers",
    "extender-http",
    "extender-split",
    "extender-split-h2",
    "extender-split-h1",
    "extender-split-http",
    "dra",
)
# The modes with a policy API, where the set_resource-to-schedulable trials run.
WAKE_MODES: Final = frozenset(m for m in ALL_MODES if not m.startswith("none"))
RESOURCE: Final = "tput"
KEYS: Final = Keys.for_domain(DEFAULT_RESOURCE_DOMAIN)
PACK: Final = KEYS.pack
MARKERS: Final = KEYS.markers
# `gang` pods: consecutive pods form a gang of this many (the last one of what is left).
GANG_SIZE: Final = 8
LABEL: Final = "bench.escher.io/run"
WARMUP_PODS: Final = 20
# The scheduling cycle's framework phases; kube-scheduler calls the extenders' filter after
# Filter and their prioritize after Score, inside scheduling_algorithm_duration_seconds, so
# what that histogram holds beyond these is the extenders' share (plus a little bookkeeping).
FRAMEWORK_POINTS: Final = frozenset({"PreFilter", "Filter", "PreScore", "Score"})


@dataclass(frozen=True)
class Setup:
    """What every run of one benchmark shares, so modes are compared on equal footing."""

    nodes: int
    pods: int
    qps: float = 1000.0
    burst: int = 2000
    # None: each mode's own shipped share (escher_harness.bench.sampling).
    percentage_of_nodes_to_score: int | None = None
    bound_timeout: float = 600.0
    # Where to write a py-spy profile of the extender's measured window (extender mode).
    profile_dir: Path | None = None
    # set_resource-to-schedulable trials after the workloads (modes in WAKE_MODES; 0: none).
    wake_trials: int = 0
    wake_pods: int = 10


@dataclass(frozen=True)
class Measured:
    """One run's rows (one per workload) and its set_resource-to-schedulable trials."""

    rows: list[dict[str, Any]]
    wake: list[dict[str, Any]]


def kinds(mode: Mode) -> tuple[Kind, ...]:
    """The workloads a mode runs: ephemeral pods need a resource only the policy API sets;
    gang members are measured where a gang is honoured (the extender modes) and against
    kube-scheduler alone placing the same pods as if they were none (mode none)."""
    if mode == "none":
        return ("plain", "gang")
    if mode.startswith("none"):
        return ("plain",)
    if mode.startswith("extender"):
        return ("plain", "ephemeral", "prefer", "gang")
    return ("plain", "ephemeral", "prefer")


def window_rate(bound_at: list[float], low: float = 0.1, high: float = 0.9) -> float:
    """Pods/s between the `low` and `high` quantiles of the bind times (monotonic seconds).
    The edges are left out: the scheduler's start-up before, and the stragglers after."""
    times = sorted(bound_at)
    if len(times) < 2:
        raise ValueError("a rate needs at least 2 bind times")
    i, j = math.floor(low * (len(times) - 1)), math.ceil(high * (len(times) - 1))
    span = times[j] - times[i]
    return (j - i) / span if span > 0 else math.inf


def run(
    mode: Mode, setup: Setup, progress: Callable[[str], None], log_dir: Path | None = None
) -> Measured:
    """Start a cluster in `mode` and measure each of its workloads (one row per workload),
    then run its set_resource-to-schedulable trials."""
    with _cluster(mode, setup, progress, log_dir) as info:
        api = api_client(info.kubeconfig, pool_size=32)
        try:
            _warm_up(info, api, progress)
            rows = [_measure(info, api, mode, kind, setup, progress) for kind in kinds(mode)]
            trials = []
            if setup.wake_trials and mode in WAKE_MODES:
                trials = [
                    {"mode": mode, "nodes": setup.nodes, "trial": k, **t}
                    for k, t in enumerate(
                        wake.run(
                            info,
                            api,
                            setup.wake_trials,
                            setup.wake_pods,
                            lambda msg: progress(f"{mode}/{msg}"),
                            writeback_idle,
                        )
                    )
                ]
            return Measured(rows, trials)
        finally:
            api.close()  # type: ignore[no-untyped-call]


@contextmanager
def _cluster(
    mode: Mode, setup: Setup, progress: Callable[[str], None], log_dir: Path | None
) -> Iterator[localcluster.ClusterInfo]:
    with tempfile.TemporaryDirectory(prefix=f"escher-tput-{mode}-") as tmp:
        progress(f"{mode}: starting the control plane with {setup.nodes} nodes")
        spec = localcluster.ClusterSpec(
            dir=Path(tmp),
            nodes=setup.nodes,
            mode=_cluster_mode(mode),
            verbs_tls=not mode.endswith("-http"),
            verbs_http2=not mode.endswith("-h1"),
            verbs_http1=not mode.endswith("-h2"),
            # extender and extender-http send every pod every exchange, as before the split.
            scope="every-pod" if mode in ("extender", "extender-http") else "split",
            node_resources=(
                {m: str(MARKER_CAPACITY) for m in MARKERS} if mode == "none-markers" else {}
            ),
            kwok=False,
            client_qps=setup.qps,
            client_burst=setup.burst,
            percentage_of_nodes_to_score=setup.percentage_of_nodes_to_score,
            timeout=300.0,
        )
        info = localcluster.up(spec)
        try:
            yield info
        finally:
            if log_dir is not None:
                environment.keep_logs(info.processes, log_dir)
            localcluster.down(Path(tmp))


def _cluster_mode(mode: Mode) -> ClusterMode:
    if mode.startswith("extender"):
        return "extender"
    return "none" if mode == "none-markers" else mode  # type: ignore[return-value]


def _warm_up(
    info: localcluster.ClusterInfo, api: client.ApiClient, progress: Callable[[str], None]
) -> None:
    """A few pods through every path first: connections, caches, the extender's first calls."""
    work = Workload(api)
    pods = [_pod(i, "warm", None, WARMUP_PODS) for i in range(WARMUP_PODS)]
    names = [p["metadata"]["name"] for p in pods]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work.create, pods))
    if work.bound(names, timeout=120) < len(names):
        raise RuntimeError(f"{info.mode}: the warm-up pods were not all bound in 120s")
    _delete_all(api, "warm")
    writeback_idle(info)
    progress(f"{info.mode}: warmed up with {WARMUP_PODS} pods")


def writeback_idle(info: localcluster.ClusterInfo, timeout: float = 300.0) -> None:
    """Wait until the extender has nothing left to write to the nodes: in extender mode it
    writes its markers to every node once at start (5,000 node patches at 5,000 nodes), which
    must not fall into the first measured window."""
    deadline = time.monotonic() + timeout
    while (pending := extender_metric(info, "escher_writeback_pending_nodes")) is not None:
        if not pending:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{info.mode}: {pending:g} nodes still to write after {timeout}s")
        time.sleep(0.5)


def _pod(i: int, run: str, resource: str | None, pods: int) -> dict[str, Any]:
    """Pod `i` of `pods` of workload `run`; `prefer` pods bin-pack on the resource (in pure
    mode the annotation is read by nobody: the same pods, placed by kube-scheduler alone);
    `gang` pods form gangs of GANG_SIZE consecutive pods, all-or-nothing (in mode none the
    labels are read by nobody)."""
    labels: dict[str, str] = {LABEL: run}
    annotations: dict[str, str] = {}
    if run == "prefer":
        annotations[PACK] = RESOURCE
    if run == "gang":
        first = i - i % GANG_SIZE
        labels[KEYS.gang] = f"g{first // GANG_SIZE}"
        annotations[KEYS.gang_min] = str(min(GANG_SIZE, pods - first))
    return pod_manifest(
        # Zero-padded, so that listed by name the pods come gang by gang (unpadded, gang-2
        # came after gang-199). kube-scheduler, started once they exist, queues them in
        # random order all the same: docs/gangs.md, "How all-or-nothing holds".
        f"{run}-{i:05d}",
        limits={resource: "1"} if resource else None,
        requests={"cpu": "100m", "memory": "64Mi"},
        labels=labels,
        annotations=annotations,
    )


def _measure(
    info: localcluster.ClusterInfo,
    api: client.ApiClient,
    mode: Mode,
    kind: Kind,
    setup: Setup,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    resource = _set_resource(info, setup) if kind in ("ephemeral", "prefer") else None
    localcluster.stop_component(info.dir, "kube-scheduler")
    work = Workload(api)
    t = time.monotonic()
    pods = [_pod(i, kind, resource, setup.pods) for i in range(setup.pods)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(work.create, pods))
    progress(
        f"{mode}/{kind}: {setup.pods} pods created in {time.monotonic() - t:.1f}s "
        "with kube-scheduler stopped; starting it"
    )
    ext_before = _extender_metrics(info)
    api_before = _apiserver_metrics(api)
    cpu_before = _cpu(info)
    load_before = os.getloadavg()[0]
    info, bound, started, recording = _schedule(info, work, setup, f"{mode}-{kind}-{setup.nodes}")
    cpu_after = _cpu(info)
    time.sleep(1.0)  # the last binds' trailing writes (events, claim status) are counted
    writes = apimetrics.difference(
        apimetrics.parse_write_counts(_apiserver_metrics(api), apimetrics.LEASES_ONLY),
        apimetrics.parse_write_counts(api_before, apimetrics.LEASES_ONLY),
    )
    if len(bound) < setup.pods:
        raise RuntimeError(
            f"{mode}/{kind}: only {len(bound)} of {setup.pods} pods bound in "
            f"{setup.bound_timeout:.0f}s"
        )
    times = sorted(bound.values())
    rate = window_rate(times)
    row: dict[str, Any] = {
        "mode": mode,
        "workload": kind,
        "nodes": setup.nodes,
        "pods": setup.pods,
        "pods_per_s": round(rate, 1),
        "pods_per_s_first_to_last": round(setup.pods / (times[-1] - times[0]), 1),
        "seconds_start_to_last_bind": round(times[-1] - started, 2),
        "cpu_ms_per_pod": {
            name: round((cpu_after[name] - cpu_before[name]) * 1000 / setup.pods, 3)
            for name in cpu_after
            if name in cpu_before
        },
        "scheduler": _scheduler_cycle(info, setup.pods),
        "extender": extender_costs(ext_before, _extender_metrics(info), setup.pods),
        "apiserver_binding_ms": _binding_latency(api_before, _apiserver_metrics(api)),
        "api_writes": apimetrics.per_pod(writes, setup.pods),
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "over_capacity": _over_capacity(api, kind, info.resource_domain if mode == "dra" else None),
    }
    if recording is not None and recording.out.exists():
        row["profile"] = {
            "file": str(recording.out),
            "top_frames": [vars(f) for f in profile.top_frames(recording.out.read_text())],
        }
    _delete_all(api, kind)
    top = sorted(row["api_writes"]["by_request"].items(), key=lambda kv: -kv[1])
    progress(
        f"{mode}/{kind}: {row['pods_per_s']} pods/s (10-90% window), "
        f"extender CPU {row['cpu_ms_per_pod'].get('extender', '-')} ms/pod, "
        f"{row['api_writes']['per_pod']} API writes/pod ("
        + ", ".join(f"{k} {v:g}" for k, v in top)
        + "), kube-scheduler's client waited "
        f"{row['scheduler']['client_rate_limiter_wait_s']}s for its QPS budget"
    )
    return row


def _schedule(
    info: localcluster.ClusterInfo, work: Workload, setup: Setup, name: str
) -> tuple[localcluster.ClusterInfo, dict[str, float], float, profile.Recording | None]:
    """Start kube-scheduler on the pods waiting, with the watch (and the profile `name`)
    running, until all are bound or the time is up: the cluster as restarted, each pod's
    bind time, when kube-scheduler was started, and the profile recorded."""
    stop = threading.Event()
    found: dict[str, dict[str, float]] = {}
    watcher = threading.Thread(
        target=lambda: found.setdefault("bound", work.watch_bound(setup.pods, stop)),
        daemon=True,
    )
    watcher.start()
    recording = _profile(info, setup, name)
    time.sleep(0.5)  # the watch is established before the first bind
    started = time.monotonic()
    info = localcluster.start_component(info.dir, "kube-scheduler", timeout=120)
    watcher.join(timeout=setup.bound_timeout)
    stop.set()
    watcher.join()
    if recording is not None:
        recording.stop()
    return info, found.get("bound", {}), started, recording


def _profile(info: localcluster.ClusterInfo, setup: Setup, name: str) -> profile.Recording | None:
    extender = _record(info, "extender")
    if setup.profile_dir is None or info.mode != "extender" or extender is None:
        return None
    setup.profile_dir.mkdir(parents=True, exist_ok=True)
    return profile.Recording(extender.pid, setup.profile_dir / f"{name}.txt")


def _set_resource(info: localcluster.ClusterInfo, setup: Setup) -> str:
    """One unit more per node than an even spread needs, set on every node and written back
    (the scheduler, about to be restarted, must see it in the nodes' status)."""
    assert info.extender_url is not None
    per_node = math.ceil(setup.pods / setup.nodes) + 1
    deadline = time.monotonic() + 120
    with PolicyClient(info.extender_url, info.token, timeout=60) as policy:
        while True:
            result = policy.set_resource(RESOURCE, per_node)
            if result.durable:
                return result.resource
            if time.monotonic() > deadline:
                raise RuntimeError(f"{RESOURCE} was not written to the nodes in 120s")
            time.sleep(0.5)


def _delete_all(api: client.ApiClient, run: str) -> None:
    Workload(api).delete_labelled(f"{LABEL}={run}")


def _record(info: localcluster.ClusterInfo, name: str) -> ProcessRecord | None:
    return next((p for p in info.processes if p.name == name), None)


def _cpu(info: localcluster.ClusterInfo) -> dict[str, float]:
    records = {name: _record(info, name) for name in COMPONENTS}
    return {name: cpu_seconds(r) for name, r in records.items() if r is not None}


def _scrape(url: str, token: str | None) -> str:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    r = httpx.get(url, headers=headers, verify=False, timeout=30)
    r.raise_for_status()
    return r.text


def _scheduler_cycle(info: localcluster.ClusterInfo, pods: int) -> dict[str, Any]:
    """kube-scheduler's own view of the run (its metrics began when it was started for it)."""
    text = _scrape(f"https://127.0.0.1:{info.ports['scheduler']}/metrics", None)
    algorithm = promhist.histograms(
        text, "scheduler_scheduling_algorithm_duration_seconds", lambda _: "all"
    ).get("all", promhist.EMPTY)
    points = promhist.histograms(
        text,
        "scheduler_framework_extension_point_duration_seconds",
        lambda labels: (
            labels["extension_point"] if labels.get("extension_point") in FRAMEWORK_POINTS else None
        ),
    )
    attempts = promhist.histograms(
        text, "scheduler_scheduling_attempt_duration_seconds", lambda labels: labels["result"]
    )
    framework_s = sum(h.sum for h in points.values())
    outside_s = max(0.0, algorithm.sum - framework_s)
    # client-go's token bucket: how long kube-scheduler's requests waited for its client QPS
    # (mode dra makes about 7 writes per pod, so a budget can cap it where 2 would not).
    throttled = promhist.histograms(
        text, "rest_client_rate_limiter_duration_seconds", lambda _: "all"
    ).get("all", promhist.EMPTY)
    # Opportunistic batching (beta, on by default since 1.35): a pod like the one before it
    # takes that cycle's next-best node as a hint, skipping the cluster's filters and scores.
    # kube-scheduler turns it off for a profile with any extender configured
    # (framework.computeBatchablePlugins), and PodTopologySpread's default constraints make
    # every pod unsignable (the default profile): read so that a mode it helps shows.
    batch = promhist.counters(text, "scheduler_batch_attempts", lambda labels: labels.get("result"))
    return {
        "attempts": {k: int(h.count) for k, h in sorted(attempts.items())},
        "batch_hint_used_share": round(batch.get("hint_used", 0.0) / pods, 4),
        "algorithm_ms_per_pod": round(algorithm.sum * 1000 / pods, 4),
        "framework_ms_per_pod": {
            k: round(h.sum * 1000 / pods, 4) for k, h in sorted(points.items())
        },
        # The algorithm's time outside the framework's phases: the extenders' filter and
        # prioritize calls, node selection and bookkeeping. Compared across modes, the
        # difference from mode none is what the extender costs the cycle.
        "outside_framework_ms_per_pod": round(outside_s * 1000 / pods, 4),
        "attempt_ms": {k: h.summary_ms() for k, h in sorted(attempts.items())},
        "client_rate_limiter_wait_s": round(throttled.sum, 3),
        "client_requests": int(throttled.count),  # every request passes the bucket
    }


def extender_metric(info: localcluster.ClusterInfo, name: str) -> float | None:
    """The value of the extender's unlabelled metric `name` now (0 if it has none yet); None
    without an extender."""
    text = _extender_metrics(info)
    if text is None:
        return None
    prefix = name + " "
    return next((float(ln.split()[-1]) for ln in text.splitlines() if ln.startswith(prefix)), 0.0)


def _extender_metrics(info: localcluster.ClusterInfo) -> str | None:
    if info.extender_url is None:
        return None
    return _scrape(f"{info.extender_url}/metrics", info.token)


def extender_costs(before: str | None, after: str | None, pods: int) -> dict[str, Any] | None:
    """The extender's server-side latency per verb, and its bind's API calls, over the run."""
    if before is None or after is None:
        return None

    def verbs(text: str) -> dict[str, promhist.Histogram]:
        return promhist.histograms(
            text, "escher_extender_request_seconds", lambda labels: labels["verb"]
        )

    def binds(text: str) -> dict[str, promhist.Histogram]:
        return promhist.histograms(text, "escher_bind_api_seconds", lambda _: "bind_api")

    spent = promhist.minus(verbs(after), verbs(before))
    served = {v: h for v, h in spent.items() if h.count > 0}
    return {
        "verb_ms": {v: h.summary_ms() for v, h in sorted(served.items())},
        "verb_ms_per_pod": round(sum(h.sum for h in served.values()) * 1000 / pods, 4),
        "bind_api_ms": promhist.minus(binds(after), binds(before))
        .get("bind_api", promhist.EMPTY)
        .summary_ms(),
    }


def _apiserver_metrics(api: client.ApiClient) -> str:
    method, url, headers, body, post = api.param_serialize(
        "GET", "/metrics", auth_settings=["BearerToken"]
    )
    raw: Any = api.call_api(method, url, header_params=headers, body=body, post_params=post)
    raw.read()
    return str(raw.data.decode())


def _binding_latency(before: str, after: str) -> dict[str, Any]:
    """The API server's own latency for the run's Binding creations (whoever sent them)."""

    def binding(text: str) -> dict[str, promhist.Histogram]:
        return promhist.histograms(
            text,
            "apiserver_request_duration_seconds",
            lambda labels: (
                "binding"
                if labels.get("resource") == "pods" and labels.get("subresource") == "binding"
                else None
            ),
        )

    return (
        promhist.minus(binding(after), binding(before)).get("binding", promhist.EMPTY).summary_ms()
    )


def _over_capacity(api: client.ApiClient, run: str, dra_domain: str | None = None) -> list[str]:
    """Nodes whose bound pods of this run ask for more than the node's allocatable. Mode dra
    (`dra_domain`, the service's domain and driver): the domain's resources are devices, not
    allocatable: each node's claimed devices against its published ones instead."""
    core = client.CoreV1Api(api)
    problems: list[str] = []
    if dra_domain is not None:
        slices, claims = dracheck.read(api, dra_domain)
        problems = dracheck.over_capacity(slices, claims, dra_domain, f"{dra_domain}/resource")

    def items(raw: Any) -> list[dict[str, Any]]:
        return list(json.loads(raw.data)["items"])

    allocatable = {
        n["metadata"]["name"]: n["status"].get("allocatable", {})
        for n in items(core.list_node(_preload_content=False))
    }
    asked: dict[str, dict[str, Fraction]] = {}
    selector = f"{LABEL}={run}"
    pods = core.list_namespaced_pod("default", label_selector=selector, _preload_content=False)
    for p in items(pods):
        node = p["spec"].get("nodeName")
        if not node:
            continue
        per = asked.setdefault(node, {})
        per["pods"] = per.get("pods", Fraction(0)) + 1
        for c in p["spec"]["containers"]:
            res = c.get("resources", {})
            for name, q in (res.get("requests", {}) | res.get("limits", {})).items():
                if name in MARKERS:  # occupies nothing: kube-scheduler and the kubelet skip it
                    continue
                if dra_domain is not None and name.startswith(f"{dra_domain}/"):
                    continue  # devices: dracheck's

                per[name] = per.get(name, Fraction(0)) + quantity.parse(q, field=name)
    return problems + sorted(
        node
        for node, per in asked.items()
        if any(
            amount > quantity.parse(allocatable.get(node, {}).get(name, "0"), field=name)
            for name, amount in per.items()
        )
    )
