"""A failover as deploy/ runs the verbs: two replicas behind the service proxy, the split
scope, filter and prioritize on the verbs' HTTP/1.1 listener and bind on the HTTP/2 one.

The leader is SIGSTOPped: the HTTP/1.1 connection kube-scheduler holds to it (through the
proxy, as conntrack keeps one through a Service) answers nothing, and unlike the HTTP/2 one
no health check drops it. Go closes an HTTP/1.1 connection whose call timed out (the
entries' httpTimeout, 5 s), so the next call reaches the new leader: a pod with a
preference (prioritize) and a gang (filter, then bind over HTTP/2) created after the pause
are placed within the lease or that timeout, whichever is later, plus a margin, and every
one of the gang's members lands. tests/e2e/test_failover.py covers every-pod scope, with
more kills and more load.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from escher_harness import localcluster
from escher_harness.bench.failover import leader, pid
from escher_harness.kubeclient import api_client
from escher_harness.localcluster.config import LeaseTimes
from escher_harness.workload import Workload, pod_manifest
from extender.core.pod import Keys
from extender.esl.client import PolicyClient

LEASE = LeaseTimes(duration=4, renew_deadline=3, retry_period=0.5)
CALL_TIMEOUT = 5.0  # the filter and prioritize entries' httpTimeout (extender-split.yaml)
MARGIN = 4.0  # the proxy's readiness poll, kube-scheduler's retry backoff, a loaded machine

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.serial,
    pytest.mark.cluster(
        nodes=3, mode="extender", node_cpu="4", replicas=2, lease=LEASE, proxy_poll=0.1
    ),
]


def test_a_paused_leader_costs_the_http1_entries_one_call_timeout(
    cluster: localcluster.ClusterInfo,
) -> None:
    assert cluster.extender_url is not None and cluster.token is not None
    work = Workload(api_client(cluster.kubeconfig))
    with PolicyClient(cluster.extender_url, cluster.token) as policy:
        resource = policy.set_resource("fosplit", 2).resource
    pack = Keys.for_domain("escher.io").pack
    # Warm: kube-scheduler holds its HTTP/1.1 connection (prioritize) and its HTTP/2 one.
    work.create(pod_manifest("warm", limits={resource: "1"}, annotations={pack: resource}))
    assert work.wait(["warm"], timeout=60)["warm"].node
    old = leader(cluster)
    os.kill(pid(cluster, old), signal.SIGSTOP)
    paused_at = time.monotonic()
    gang = [f"fs-{i}" for i in range(2)]
    try:
        work.create(pod_manifest("prefers", limits={resource: "1"}, annotations={pack: resource}))
        for name in gang:
            work.create(
                pod_manifest(
                    name,
                    requests={"cpu": "1"},
                    labels={"escher.io/gang": "fs"},
                    annotations={"escher.io/gang-min": str(len(gang))},
                )
            )
        placed = work.wait(["prefers", *gang], timeout=60)
        took = time.monotonic() - paused_at
        assert all(p.node for p in placed.values()), placed
        assert leader(cluster) != old
        assert took <= max(LEASE.duration, CALL_TIMEOUT) + MARGIN, took
    finally:
        os.kill(pid(cluster, old), signal.SIGCONT)
        work.delete(["warm", "prefers", *gang])
    print(f"\nSIGSTOP of the leader: a preference pod and a gang of 2 placed {took:.1f}s after")
