"""A scenario's jobs created on a running cluster as kube-scheduling-perf creates them: jobs
at the submitting client's rate (QPS 100, burst 200) and their pods at the job controllers'
(QPS 1000, burst 1000), each a token bucket, through a pool of client threads.

The embedded control plane runs no job controller, so the pods are created directly: a job
is its group object (with gang: the approach's PodGroup, where it has one) and then its pods
`<job>-<index>`, each requesting and limited to 1 cpu and 1Gi, completing 30 s after it runs.
How each approach declares a gang (escher_harness.bench.approaches): the extender's
`<domain>/gang` label and gang-min annotation (its gated and marked variants as they
submit), native's scheduling.k8s.io PodGroup and spec.schedulingGroup, Coscheduling's
scheduler-plugins PodGroup and label. Without gang, every approach gets the same plain pods.
Called by escher_harness.bench.kubeschedperf.run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client

from escher_harness import localcluster
from escher_harness import peers as peer_gangs
from escher_harness.bench.approaches import registry
from escher_harness.bench.approaches.coscheduling import Coscheduling
from escher_harness.bench.approaches.extender import Extender
from escher_harness.bench.approaches.native import Native
from escher_harness.bench.kubeschedperf import shapes
from escher_harness.localcluster.config import all_nodes_scheduler_name
from escher_harness.workload import pod_manifest
from extender.core.pod import Keys

NAMESPACE = "default"
WORKERS = 16  # client threads creating pods (the connection pool is as large)
RETRIES = 3  # of a create the API server did not answer in time


def unsupported(approach: str, gang: bool) -> str | None:
    """Why `approach` cannot run a scenario here (with or without gang), or None."""
    a = registry.get(approach)
    if why := a.unavailable():
        return why
    if isinstance(a, Extender | Native | Coscheduling):
        return None
    if not gang and not a.uses_policy:
        return None  # default: plain pods
    if a.uses_policy:
        return "its gangs go through the policy API one gang at a time (bench gang runs them)"
    return "it has no gang scheduling"


class Bucket:
    """client-go's token bucket: `burst` tokens at first, refilled at `qps` a second."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps, self.burst = qps, burst
        self.tokens, self.last = float(burst), time.monotonic()
        self.lock = threading.Lock()

    def take(self) -> None:
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.qps)
            self.last = now
            wait = (1 - self.tokens) / self.qps if self.tokens < 1 else 0.0
            self.tokens -= 1
        if wait > 0:
            time.sleep(wait)


def _pod(name: str, scheduler: str, **kw: Any) -> dict[str, Any]:
    shape = {"cpu": shapes.POD_CPU, "memory": shapes.POD_MEMORY}
    limits = {**shape, **kw.pop("extra_limits", {})}
    return pod_manifest(
        name,
        requests=shape,
        limits=limits,
        scheduler_name=scheduler,
        run_time=shapes.POD_RUN_SECONDS,
        **kw,
    )


def _extender_member(a: Extender, info: localcluster.ClusterInfo, job: str, size: int) -> Any:
    domain = info.resource_domain
    keys = Keys.for_domain(domain)
    scheduler = info.scheduler_name
    if a.marked and info.paths.get("scheduler_config"):
        scheduler = all_nodes_scheduler_name(scheduler)

    def member(name: str) -> dict[str, Any]:
        return _pod(
            name,
            scheduler,
            labels={f"{domain}/gang": job},
            annotations={f"{domain}/gang-min": str(size)},
            scheduling_gates=(f"{domain}/gang",) if a.gate == "always" else (),
            extra_limits=dict.fromkeys((keys.gang_marker, keys.bind_marker), "0")
            if a.marked
            else {},
        )

    return member


def job_maker(
    approach: str, info: localcluster.ClusterInfo, api: client.ApiClient, gang: bool
) -> Callable[[str, int], Callable[[str], dict[str, Any]]]:
    """For a job (name, size): create its group object if it has one, and return how to
    make each of its pods."""
    a = registry.get(approach)
    groups = client.CustomObjectsApi(api)
    plain = info.scheduler_name

    def make(job: str, size: int) -> Callable[[str], dict[str, Any]]:
        if not gang:
            return lambda name: _pod(name, plain)
        if isinstance(a, Extender):
            return _extender_member(a, info, job, size)  # type: ignore[no-any-return]
        if isinstance(a, Native):
            groups.create_namespaced_custom_object(
                peer_gangs.NATIVE_GROUP,
                peer_gangs.NATIVE_VERSION,
                NAMESPACE,
                "podgroups",
                _group(
                    f"{peer_gangs.NATIVE_GROUP}/{peer_gangs.NATIVE_VERSION}",
                    job,
                    {"schedulingPolicy": {"gang": {"minCount": size}}},
                ),
            )

            def native(name: str) -> dict[str, Any]:
                pod = _pod(name, plain)
                pod["spec"]["schedulingGroup"] = {"podGroupName": job}
                return pod

            return native
        groups.create_namespaced_custom_object(
            peer_gangs.COSCHEDULING_GROUP,
            peer_gangs.COSCHEDULING_VERSION,
            NAMESPACE,
            "podgroups",
            _group(
                f"{peer_gangs.COSCHEDULING_GROUP}/{peer_gangs.COSCHEDULING_VERSION}",
                job,
                {"minMember": size},
            ),
        )
        return lambda name: _pod(name, plain, labels={peer_gangs.COSCHEDULING_LABEL: job})

    return make


def _group(api_version: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "PodGroup", "metadata": {"name": name}, "spec": spec}


def job_names(jobs: int) -> list[str]:
    width = max(5, len(str(jobs - 1)))
    return [f"j{i:0{width}d}" for i in range(jobs)]


def create_pod(core: Any, manifest: dict[str, Any]) -> str | None:
    """Create one pod as a job controller would, retrying what the API server could not
    answer in time (429, 5xx); None once it exists, else why not. A create that timed out
    may have been stored: its retry's 409 means it was."""
    for attempt in range(RETRIES + 1):
        try:
            # Unparsed: decoding each reply into a V1Pod would cost the client more than
            # the create costs the API server. Read, so its connection goes back to the
            # pool: one left unread is dropped, and a new TLS handshake costs more still.
            reply = core.create_namespaced_pod(NAMESPACE, manifest, _preload_content=False)
            reply.read()
            reply.release_conn()
            return None
        except client.ApiException as e:
            status = e.status or 0
            if status == 409 and attempt:
                return None
            if not (status == 429 or status >= 500) or attempt == RETRIES:
                return f"{status} {e.reason}"
    return None  # not reached: the last attempt returns


def create(
    api: client.ApiClient,
    sc: shapes.Scenario,
    make_job: Callable[[str, int], Callable[[str], dict[str, Any]]],
    created: Callable[[int], None],
) -> None:
    """Create the scenario's jobs and pods at the project's rates; `created(n)` is told each
    pod created. RuntimeError if any create failed."""
    core = client.CoreV1Api(api)
    jobs, pods = Bucket(shapes.JOB_QPS, shapes.JOB_BURST), Bucket(shapes.POD_QPS, shapes.POD_BURST)
    errors: list[str] = []
    lock = threading.Lock()
    done = 0

    def one(manifest: dict[str, Any]) -> None:
        nonlocal done
        error = create_pod(core, manifest)
        with lock:
            if error:
                errors.append(f"{manifest['metadata']['name']}: {error}")
                return
            done += 1
            created(done)

    with ThreadPoolExecutor(WORKERS, thread_name_prefix="ksp-create") as pool:
        for job in job_names(sc.jobs):
            jobs.take()
            member = make_job(job, sc.size)
            for i in range(sc.size):
                pods.take()
                pool.submit(one, member(f"{job}-{i}"))
                if errors:
                    break
    if errors:
        raise RuntimeError(f"{len(errors)} pods not created, e.g. {errors[0]}")
