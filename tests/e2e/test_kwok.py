"""kwok as the fake nodes' kubelets on the real local control plane
(escher_harness.localcluster.kwok, its stages.yaml).

- A pod made with a run time goes Running, then Succeeded after about that long, and what it
  held is free again: a pod waiting for it is bound only after it has Succeeded. In every
  mode: `none` (a node with room for one such pod's cpu), `extender` and `pure` (one unit of an
  ephemeral resource made with the policy API; in extender mode the extender's own ledger must
  let the unit go, in pure mode kube-scheduler alone). A pod without a run time keeps running.
- Extended resources written to a node's status by others (as the extender's write-back does)
  survive kwok's heartbeats.
- A deleted pod with a grace period (a deletionTimestamp) is gone at once: none hangs
  Terminating with no kubelet to confirm it.
- Without kwok, bound pods stay Pending.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from builders import cluster_of
from kubernetes import client, watch

from escher_harness.kubeclient import api_client
from escher_harness.localcluster import ClusterInfo
from escher_harness.localcluster.kwok import HEARTBEAT_ANNOTATION
from escher_harness.pytest_plugin import ClusterFactory
from escher_harness.workload import Workload, pod_manifest
from extender.esl.client import PolicyClient

pytestmark = pytest.mark.e2e

RUN_TIME = 5.0
# Succeeded this long after Running, as seen through a watch: kwok's delay starts when it sees
# the pod Running (the same event, give or take its arrival), and a loaded machine adds to it.
EARLIEST = RUN_TIME - 0.5
LATEST = RUN_TIME + 10.0
TIMEOUT = 60.0
_names = itertools.count()


@dataclass(frozen=True)
class Gate:
    """What one pod at a time can hold on the single node: the request that fills it."""

    info: ClusterInfo
    limits: dict[str, str]
    requests: dict[str, str]


@pytest.fixture(params=["none", "extender", "pure"])
def gate(request: pytest.FixtureRequest, local_cluster: ClusterFactory) -> Iterator[Gate]:
    mode = request.param
    if mode == "none":
        # Room for one 1-cpu pod beside the 1-cpu pod that keeps running.
        info = local_cluster(nodes=1, node_cpu="2")
        yield Gate(info, limits={"cpu": "1"}, requests={"cpu": "1"})
        return
    info = local_cluster(nodes=1, **cluster_of(mode))
    assert info.extender_url and info.token
    with PolicyClient(info.extender_url, info.token) as policy:
        resource = policy.set_resource("slot", 1, node=info.nodes[0]).resource
    yield Gate(info, limits={resource: "1"}, requests={})


def test_a_pod_runs_for_its_run_time_then_frees_what_it_held(gate: Gate) -> None:
    info = gate.info
    first, second, forever = (f"{n}-{next(_names)}" for n in ("first", "second", "forever"))

    def pod(name: str, **kw: Any) -> dict[str, Any]:
        return pod_manifest(
            name,
            limits=gate.limits,
            requests=gate.requests or None,
            scheduler_name=info.scheduler_name,
            **kw,
        )

    with api_client(info.kubeconfig) as api:
        work = Workload(api)
        # Mode none: `forever` takes the other cpu; otherwise it asks for nothing scarce.
        work.create(
            pod_manifest(
                forever, requests=gate.requests or None, scheduler_name=info.scheduler_name
            )
        )
        work.create(pod(first, run_time=RUN_TIME))
        started = work.wait_phase([first, forever], "Running", timeout=TIMEOUT)
        assert all("Running" in started[n].phases for n in (first, forever)), started
        work.create(pod(second))  # wants what `first` holds
        # One watch sees `first` finish and `second` get bound and run, in that order.
        seen = work.wait_phase([first, second], "Running", timeout=TIMEOUT)
        assert "Running" in seen[second].phases, f"{second} never ran: {seen}"
        finished = seen[first].phases["Succeeded"]
        ran = finished - started[first].phases["Running"]
        assert EARLIEST <= ran <= LATEST, f"{first} ran {ran:.2f}s for a run time of {RUN_TIME}s"
        bound = seen[second].bound
        assert bound is not None and bound >= finished, "bound before what it needs was free"
        # Without a run time a pod runs on: `forever` has been Running longer than RUN_TIME.
        assert client.CoreV1Api(api).read_namespaced_pod(forever, "default").status.phase == (
            "Running"
        )
        work.delete([first, second, forever])


def test_extended_resources_written_by_others_survive_kwok_heartbeats(
    local_cluster: ClusterFactory,
) -> None:
    info = local_cluster(nodes=1)
    node = info.nodes[0]
    resource = f"{info.resource_domain}/written-by-others"
    with api_client(info.kubeconfig) as api:
        core = client.CoreV1Api(api)
        # Heartbeats every 2 s on this node instead of every 20-45 s, so several come quickly.
        core.patch_node(node, {"metadata": {"annotations": {HEARTBEAT_ANNOTATION: "2s"}}})
        # As the extender's write-back: a merge patch of nodes/status.
        written: Any = core.patch_node_status(
            node,
            {"status": {"capacity": {resource: "3"}, "allocatable": {resource: "3"}}},
            _content_type="application/merge-patch+json",
        )
        beats: list[str] = []
        nodes: Any = watch.Watch()  # type: ignore[no-untyped-call]
        for event in nodes.stream(
            core.list_node,
            field_selector=f"metadata.name={node}",
            resource_version=written.metadata.resource_version,
            timeout_seconds=int(TIMEOUT),
        ):
            status = event["object"].status
            (ready,) = (c for c in status.conditions if c.type == "Ready")
            beat = ready.last_heartbeat_time.isoformat()
            if beat not in beats:
                beats.append(beat)
            # After every one of kwok's patches, what others wrote is still there.
            assert (status.capacity.get(resource), status.allocatable.get(resource)) == (
                "3",
                "3",
            ), f"after heartbeat {len(beats)}: {status.capacity}, {status.allocatable}"
            if len(beats) >= 3:
                nodes.stop()
        assert len(beats) >= 3, f"kwok renewed the heartbeat {len(beats)} times in {TIMEOUT}s"


def test_a_deleted_pod_does_not_hang_terminating(shared_cluster: ClusterInfo) -> None:
    name = f"graceful-{next(_names)}"
    with api_client(shared_cluster.kubeconfig) as api:
        work, core = Workload(api), client.CoreV1Api(api)
        manifest = pod_manifest(name, scheduler_name=shared_cluster.scheduler_name)
        manifest["spec"]["terminationGracePeriodSeconds"] = 300
        work.create(manifest)
        assert "Running" in work.wait_phase([name], "Running", timeout=TIMEOUT)[name].phases
        deleted = time.monotonic()
        # With its grace period: only a deletionTimestamp, until a kubelet (kwok) finishes it.
        terminating: Any = core.delete_namespaced_pod(name, "default")
        assert terminating.metadata.deletion_timestamp is not None
        pods: Any = watch.Watch()  # type: ignore[no-untyped-call]
        for event in pods.stream(
            core.list_namespaced_pod,
            "default",
            field_selector=f"metadata.name={name}",
            resource_version=terminating.metadata.resource_version,
            timeout_seconds=int(TIMEOUT),
        ):
            if event["type"] == "DELETED":
                pods.stop()
        gone = time.monotonic() - deleted
        assert gone < TIMEOUT, "the pod was not deleted"
        assert (
            core.list_namespaced_pod("default", field_selector=f"metadata.name={name}").items == []
        )


def test_without_kwok_bound_pods_stay_pending(local_cluster: ClusterFactory) -> None:
    info = local_cluster(nodes=1, kwok=False)
    assert "kwok" not in info.pids
    name = f"pending-{next(_names)}"
    with api_client(info.kubeconfig) as api:
        work = Workload(api)
        work.create(pod_manifest(name, scheduler_name=info.scheduler_name, run_time=0))
        # As long as kwok takes to run a bound pod, many times over.
        seen = work.wait_phase([name], "Running", timeout=3.0)[name]
        assert seen.bound is not None and seen.phases.keys() == {"Pending"}, seen
