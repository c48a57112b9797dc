"""The API server goes away: policy calls answer within the configured wait (503: the change's
object could not be written, so it is not confirmed), probes stay green and fast, and when it
returns every change is on all of its nodes or on none, never on some, and never twice.
Measured on the real control plane with kube-apiserver paused (SIGSTOP: connections hang, the
worst kind of outage) and resumed, in mode extender (the resources in Node status, as in pure
mode: the same write-back engine and policy objects) and in mode dra (the resources as
ResourceSlices: "on a node" is then the node's complete pool of devices).

"Fast" is judged against what decides a restart, the liveness probe's timeout in the shipped
manifest, not against a latency figure a noisy machine may miss; the latencies are printed."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from escher_harness import localcluster
from escher_harness.bench.outage import apiserver_pid, converged, paused
from escher_harness.kubeclient import api_client
from escher_harness.workload import Workload

# Probe latency is judged against the liveness timeout: alone, not beside other clusters.
pytestmark = [pytest.mark.e2e, pytest.mark.serial, pytest.mark.cluster(nodes=3)]

CALLS = 200
MANIFEST = Path(__file__).parents[2] / "deploy" / "base" / "extender.yaml"


def liveness_timeout_ms() -> float:
    """The shipped liveness probe's timeout: a /healthz slower than this restarts the pod."""
    for doc in yaml.safe_load_all(MANIFEST.read_text()):
        if doc and doc.get("kind") == "Deployment":
            container = doc["spec"]["template"]["spec"]["containers"][0]
            return float(container["livenessProbe"]["timeoutSeconds"]) * 1000
    raise AssertionError(f"no Deployment in {MANIFEST}")


@pytest.mark.parametrize(
    "cluster", [{"mode": "extender", "scope": "every-pod"}, {"mode": "dra"}], indirect=True
)
def test_probes_stay_fast_while_policy_calls_wait_on_a_paused_api_server(
    cluster: localcluster.ClusterInfo,
) -> None:
    assert cluster.extender_url and cluster.token
    url = cluster.extender_url
    apiserver = apiserver_pid(cluster)
    headers = {"Authorization": f"Bearer {cluster.token}"}

    def probe(stop: threading.Event, probes: list[float], failed: list[str]) -> None:
        # Its own thread and client, as the kubelet is: the policy calls' client work in the
        # event loop below must not be counted as the server's latency.
        with httpx.Client(base_url=url, timeout=60) as client:
            while not stop.is_set():
                t = time.perf_counter()
                r = client.get("/healthz")
                probes.append((time.perf_counter() - t) * 1000)
                ready = client.get("/readyz")  # one replica: stays ready
                failed += [f"{x.url.path} {x.status_code}" for x in (r, ready) if x.is_error]
                stop.wait(0.02)  # the probes' pace

    failed_probes: list[str] = []

    async def scenario() -> tuple[list[int], list[float], float]:
        async with httpx.AsyncClient(
            base_url=url, headers=headers, timeout=60,
            limits=httpx.Limits(max_connections=CALLS + 10),
        ) as client:  # fmt: skip
            probes: list[float] = []
            stop = threading.Event()
            prober = threading.Thread(target=probe, args=(stop, probes, failed_probes))
            started = time.monotonic()
            prober.start()
            try:
                responses = await asyncio.gather(
                    *(
                        client.put(f"/v1/resources/outage-{i}", json={"capacity": 1 + i % 3})
                        for i in range(CALLS)
                    )
                )
                waited = time.monotonic() - started
            finally:
                stop.set()
                prober.join()
            return [r.status_code for r in responses], probes, waited

    with paused(apiserver):  # resumed however the calls end
        statuses, probes, waited = asyncio.run(scenario())
    resumed = time.monotonic()
    # Every call was answered within the configured wait (10 s) plus scheduling slack: with
    # policies kept as objects a change is its object, which the paused API server cannot
    # confirm (503, not confirmed; a write it took when it resumed is applied everywhere).
    assert set(statuses) == {503}, statuses
    assert waited < 10 + 5, waited
    p99 = statistics.quantiles(probes, n=100)[98]
    print(
        f"\n{CALLS} policy calls waited {waited:.1f}s on the paused API server; /healthz "
        f"p50 {statistics.median(probes):.1f} ms, p99 {p99:.1f} ms, max {max(probes):.1f} ms "
        f"over {len(probes)} probes"
    )
    # Before issue 9 the probes shared the policy calls' thread pool and took 2.2 s. No probe
    # may reach the timeout (the kubelet would count it failed), and nearly all stay far under
    # it: the one probe that arrives with the 200 calls waits for their parsing on a loaded
    # machine (523 ms once in CI), which is queueing, not waiting on the API server.
    assert not failed_probes, failed_probes[:5]
    assert max(probes) < liveness_timeout_ms(), max(probes)
    assert p99 < liveness_timeout_ms() / 4, p99
    # When it returns, each change is on every node or on none (the objects the API server
    # took are reconciled; the others never existed), and the ledger says the same.
    work = Workload(api_client(cluster.kubeconfig))
    want = {f"escher.io/outage-{i}": str(1 + i % 3) for i in range(CALLS)}
    # Converged: no change on some nodes only, and the ledger says what the nodes show (right
    # after the resume the nodes may show nothing yet while objects the API server took are
    # being applied); each change on every node has the value asked.
    done = converged(cluster, work, want, "outage-", timeout=60)
    print(
        f"{cluster.mode}: converged {time.monotonic() - resumed:.1f}s after the API server "
        f"resumed: {len(done.applied)} of {CALLS} changes on every node, the rest on none"
    )
