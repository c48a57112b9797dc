"""Failover in mode dra, on the real control plane: two extender replicas electing a leader
behind the service proxy, the resources published as DRA devices (ResourceSlices, a
DeviceClass each) that an unmodified kube-scheduler allocates in ResourceClaims.

kube-scheduler never calls the extender in this mode, so a failover stops only policy
changes: pods that request a resource already published keep being placed while no replica
leads. Here, for SIGKILL and SIGSTOP of the leader:

- a pod requesting a published resource, created right after the signal, is placed while no
  replica is ready (no leader yet);
- the other replica leads within the lease + a margin; a change made through the Service
  then (a new resource) is published, and a pod requesting it is placed;
- nothing is lost or given twice: the devices published before the signal are the same
  after it, no claim holds a device that is not published, and no node's allocations exceed
  its capacity;
- the old leader, resumed after SIGSTOP, writes nothing: no ResourceSlice changes while it
  runs again (and the same watch, given the same time, sees the new leader's change).
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from kubernetes import client

from escher_harness import localcluster
from escher_harness.bench.failover import leader, pid
from escher_harness.kubeclient import api_client
from escher_harness.localcluster.config import LeaseTimes
from escher_harness.workload import Workload, pod_manifest

LEASE = LeaseTimes(duration=10, renew_deadline=7, retry_period=1)
# The new leader: the lease, how late the standby saw the last renewal, the proxy's poll
# (deploy/'s readiness probe, every second), and a loaded machine.
TAKEOVER = LEASE.duration + 5
QUIET = 3.0  # seconds a resumed old leader is watched for writes
DOMAIN = "escher.io"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.serial,
    pytest.mark.cluster(nodes=2, node_cpu="8", mode="dra", replicas=2, lease=LEASE, proxy_poll=1.0),
]
_names = itertools.count()


def wait_until(what: str, check: Callable[[], object], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g}s"
        time.sleep(0.1)


def put_resource(info: localcluster.ClusterInfo, name: str, capacity: int) -> None:
    """PUT /v1/resources/<name> through the Service, retried while no replica leads (the
    proxy resets, a follower answers 503); with leader election a 200 means published."""
    assert info.extender_url and info.token
    headers = {"Authorization": f"Bearer {info.token}"}
    deadline = time.monotonic() + TAKEOVER + 30
    while True:
        try:
            reply = httpx.put(
                f"{info.extender_url}/v1/resources/{name}",
                json={"capacity": capacity},
                headers=headers,
                timeout=30,
            )
            if reply.status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"PUT {name} never confirmed"
        time.sleep(0.2)


def published(api: client.ApiClient, name: str) -> list[str]:
    """Every published device of resource `name` (pools <node>/<name>/<index>), as
    pool/device, duplicates kept."""
    dra = client.ResourceV1Api(api)
    return [
        f"{s.spec.pool.name}/{d.name}"
        for s in dra.list_resource_slice().items
        if s.spec.pool.name.split("/")[1:2] == [name]
        for d in s.spec.devices or []
    ]


def held(api: client.ApiClient) -> list[str]:
    """Every allocated device, as pool/device, duplicates kept."""
    dra = client.ResourceV1Api(api)
    claims: list[Any] = dra.list_resource_claim_for_all_namespaces().items
    return [
        f"{r.pool}/{r.device}"
        for c in claims
        if c.status is not None and c.status.allocation is not None
        for r in c.status.allocation.devices.results or []
    ]


def slice_versions(api: client.ApiClient) -> dict[str, str]:
    dra = client.ResourceV1Api(api)
    slices: list[Any] = dra.list_resource_slice().items
    return {s.metadata.name: s.metadata.resource_version for s in slices}


def changes_within(api: client.ApiClient, seconds: float, then: Callable[[], Any]) -> bool:
    """Whether any ResourceSlice changes in the `seconds` after `then()` is called."""
    before = slice_versions(api)
    then()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if slice_versions(api) != before:
            return True
        time.sleep(0.2)
    return False


def nobody_ready(info: localcluster.ClusterInfo) -> bool:
    for url in localcluster.load(info.dir).replica_urls.values():
        try:
            if httpx.get(f"{url}/readyz", timeout=0.5).status_code == 200:
                return False
        except httpx.HTTPError:
            pass
    return True


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGSTOP"])
def test_a_failover_stops_no_allocation_and_loses_no_device(
    cluster: localcluster.ClusterInfo, sig: str
) -> None:
    api = api_client(cluster.kubeconfig)
    work = Workload(api)
    n = next(_names)
    name, after = f"fodra{n}", f"fodra{n}-after"
    put_resource(cluster, name, 3)  # on each node
    before = published(api, name)
    assert len(before) == 3 * len(cluster.nodes), before
    warm = [f"dra{n}-warm-{i}" for i in range(2)]
    for pod in warm:
        work.create(pod_manifest(pod, limits={f"{DOMAIN}/{name}": "1"}))
    assert all(p.node for p in work.wait(warm, timeout=60).values())
    old = leader(cluster)
    url = localcluster.load(cluster.dir).replica_urls[old]
    at = time.monotonic()
    os.kill(pid(cluster, old), signal.Signals[sig])
    during, later = f"dra{n}-during", f"dra{n}-later"
    try:
        # Placed by kube-scheduler alone: no replica has to lead for it.
        work.create(pod_manifest(during, limits={f"{DOMAIN}/{name}": "1"}))
        assert work.wait([during], timeout=60)[during].node
        placed_in = time.monotonic() - at
        assert nobody_ready(cluster), f"a replica led before {during} was checked"
        new = leader(cluster, timeout=TAKEOVER + 10)
        took_over = time.monotonic() - at
        assert new != old
        put_resource(cluster, after, 1)
        work.create(pod_manifest(later, limits={f"{DOMAIN}/{after}": "1"}))
        assert work.wait([later], timeout=60)[later].node
        if sig == "SIGSTOP":
            # Resumed: it must find itself deposed and write nothing. Watched as long as it
            # takes to answer (not ready), then QUIET s; the control: the same watch sees
            # the new leader's change within the same time.
            assert not changes_within(
                api, QUIET, lambda: os.kill(pid(cluster, old), signal.SIGCONT)
            ), "the resumed old leader wrote a ResourceSlice"
            wait_until(
                f"{old} not ready", lambda: httpx.get(f"{url}/readyz").status_code == 503, 30
            )
            assert not changes_within(api, QUIET, lambda: None), "slices changed unasked"
            assert changes_within(api, QUIET, lambda: put_resource(cluster, after, 2))
    finally:
        if sig == "SIGSTOP":
            os.kill(pid(cluster, old), signal.SIGCONT)  # idempotent: never left paused
    if sig == "SIGKILL":
        localcluster.start_component(cluster.dir, old)
    assert leader(cluster) == new
    # Nothing lost or given twice.
    assert sorted(published(api, name)) == sorted(before)
    allocated = held(api)
    assert not [d for d, k in Counter(allocated).items() if k > 1], allocated
    assert set(allocated) <= set(published(api, name)) | set(published(api, after))
    on_nodes = Counter(d.split("/")[0] for d in allocated if f"/{name}/" in d)
    assert all(k <= 3 for k in on_nodes.values()), on_nodes
    assert sum(on_nodes.values()) == len([*warm, during])
    print(
        f"\n{sig} in mode dra (lease {LEASE.duration:g}s): a pod placed {placed_in:.1f}s "
        f"after with no leader; {new} led {took_over:.1f}s after; a change then published "
        "and placed; no device lost or held twice"
    )
    assert took_over <= TAKEOVER, took_over
    work.delete([*warm, during, later])
