"""Extender mode as deploy/ runs it: each exchange only for the pods that need it.

The embedded cluster runs kube-scheduler with scheduler-config/extender-split.yaml and
deploy/'s marker admission policy (mode extender's default, ClusterSpec.scope "split"): gang
members are marked for filter, bind and preempt, pods with a preference for prioritize, and
every other pod goes through no exchange (tests/e2e/test_deploy.py proves the policy as
deploy/ installs it). Here: a plain pod and a pod that only requests an ephemeral resource
are placed and bound by kube-scheduler alone, the second held to the written-back resource by
NodeResourcesFit;
gang members are filtered and bound by the extender (a pod waiting for an ephemeral
resource is bound within seconds of it, in every class and mode: tests/e2e/test_wake.py);
pods that need no exchange keep being scheduled while the extender is down; and what the
split gives up, a gang's reserved place taken by a pod the extender never saw, costs the
gang time, never its all-or-nothing or a node's capacity.
"""

from __future__ import annotations

import itertools
import threading
import time

import httpx
import psutil
import pytest
from kubernetes import client

from escher_harness import localcluster
from escher_harness.capacity_history import PodHistory, Step, fence, over_commits
from escher_harness.kubeclient import api_client
from escher_harness.localcluster.config import VERBS, VERBS_HTTP1
from escher_harness.waits import until
from escher_harness.workload import Workload, pod_manifest
from extender.esl.client import PolicyAPIError, PolicyClient

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.cluster(nodes=3, node_cpu="4", mode="extender", kwok=False),
]

_names = itertools.count()
# When the decrease starts after its round's pods, seconds: across the window in which it
# sees fewer pods allocated than kube-scheduler is binding (a few ms to a few tens of ms
# here, by the machine's load).
DELAYS = tuple(i * 0.009 for i in range(8))  # 0-63 ms
PODS, SPACING = 12, 0.008


def calls(info: localcluster.ClusterInfo) -> dict[str, float]:
    """The extender's verb calls so far, from its request histogram's counts."""
    assert info.extender_url is not None
    text = httpx.get(
        f"{info.extender_url}/metrics",
        headers={"Authorization": f"Bearer {info.token}"},
        timeout=10,
    ).text
    out = {}
    for verb in ("filter", "prioritize", "bind"):
        prefix = f'escher_extender_request_seconds_count{{verb="{verb}"}} '
        out[verb] = next(
            (float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix)),
            0.0,
        )
    return out


def at_bind(info: localcluster.ClusterInfo, gang: str) -> int:
    """The gang's members held at the extender's bind barrier (GET /v1/gangs)."""
    r = httpx.get(
        f"{info.extender_url}/v1/gangs",
        headers={"Authorization": f"Bearer {info.token}"},
        timeout=10,
    )
    r.raise_for_status()
    return sum(m["state"] == "at-bind" for g in r.json() if g["gang"] == gang for m in g["members"])


def one_unit_on(info: localcluster.ClusterInfo, name: str, node: str | None, units: int = 1) -> str:
    """Sets ephemeral resource `name` to `units` on `node` (None: every node), durable;
    returns the name pods request."""
    assert info.extender_url is not None and info.token is not None
    with PolicyClient(info.extender_url, info.token) as policy:
        result = policy.set_resource(name, units, node=node)
        assert result.durable, result
        return result.resource


def test_a_pod_without_the_marker_never_reaches_the_extender(
    cluster: localcluster.ClusterInfo,
) -> None:
    work = Workload(api_client(cluster.kubeconfig))
    name = f"plain-{next(_names)}"
    before = calls(cluster)
    work.create(pod_manifest(name, requests={"cpu": "1"}))
    try:
        assert work.wait([name], timeout=60)[name].node
        assert calls(cluster) == before
    finally:
        work.delete([name])


def test_gang_members_go_through_the_extender_and_ephemeral_pods_through_none(
    cluster: localcluster.ClusterInfo,
) -> None:
    work = Workload(api_client(cluster.kubeconfig))
    n = next(_names)
    node = cluster.nodes[1]
    resource = one_unit_on(cluster, f"split-{n}", node)
    gang = [f"g{n}-{i}" for i in range(2)]
    pods = [
        pod_manifest(
            m,
            requests={"cpu": "1"},
            labels={"escher.io/gang": f"g{n}"},
            annotations={"escher.io/gang-min": "2"},
        )
        for m in gang
    ]
    before = calls(cluster)
    for p in pods:
        work.create(p)
    eph = f"eph-{n}"
    try:
        placed = work.wait(gang, timeout=60)
        assert all(p.node for p in placed.values()), placed
        after = calls(cluster)
        # Each member was filtered and bound by the extender (prioritize is not sent).
        assert after["filter"] >= before["filter"] + len(gang)
        assert after["bind"] == before["bind"] + len(gang)
        assert after["prioritize"] == before["prioritize"]
        # Filter went to the verbs' HTTP/1.1 listener, bind to the HTTP/2 one: kube-scheduler
        # holds a connection to each (both stay open 90 s idle).
        scheduler = psutil.Process(cluster.pids["kube-scheduler"])
        peers = {c.raddr.port for c in scheduler.net_connections("tcp") if c.raddr}
        assert {cluster.ports[VERBS], cluster.ports[VERBS_HTTP1]} <= peers, peers
        work.create(pod_manifest(eph, limits={resource: "1"}))
        assert work.wait([eph], timeout=60)[eph].node == node
        assert calls(cluster) == after
    finally:
        work.delete([*gang, eph])


def test_an_ephemeral_request_is_held_to_the_nodes_resource_without_the_extender(
    cluster: localcluster.ClusterInfo,
) -> None:
    """No marker, so the extender has no say, but NodeResourcesFit checks the written-back
    resource: the pod goes where it is, and a second one waits."""
    work = Workload(api_client(cluster.kubeconfig))
    n = next(_names)
    node = cluster.nodes[2]
    resource = one_unit_on(cluster, f"bare-{n}", node)
    first, second = f"bare-{n}-a", f"bare-{n}-b"
    before = calls(cluster)
    work.create(pod_manifest(first, limits={resource: "1"}))
    try:
        assert work.wait([first], timeout=60)[first].node == node
        work.create(pod_manifest(second, limits={resource: "1"}))
        placed = work.wait([second], timeout=5)
        assert placed[second].node is None
        assert resource in placed[second].reason, placed[second].reason
        assert calls(cluster) == before
    finally:
        work.delete([first, second])


def test_a_reserved_place_taken_by_an_unmarked_pod_delays_the_gang_and_breaks_nothing(
    cluster: localcluster.ClusterInfo,
) -> None:
    """A gang of 3 members of 3 cpu needs all 3 nodes (4 cpu each). Two members are created:
    the extender reserves a node for each and one for the member to come, and holds both at
    its bind barrier. A plain pod of 3 cpu (unmarked) bypasses the extender and takes the third
    node. The third member then fits nowhere: no member is bound (all or nothing) and no
    node goes over capacity. Once the pod is gone, the gang is planned again and placed."""
    work = Workload(api_client(cluster.kubeconfig))
    n = next(_names)
    members = [f"gb{n}-{i}" for i in range(3)]

    def member(name: str) -> dict[str, object]:
        return pod_manifest(
            name,
            requests={"cpu": "3"},
            labels={"escher.io/gang": f"gb{n}"},
            annotations={"escher.io/gang-min": "3", "escher.io/gang-timeout": "5"},
        )

    intruder = f"intruder-{n}"
    try:
        for m in members[:2]:
            work.create(member(m))
        # Both reach the bind barrier: the gang is reserved.
        until(lambda: at_bind(cluster, f"default/gb{n}") == 2, "both members at the barrier")
        work.create(pod_manifest(intruder, requests={"cpu": "3"}))
        assert work.wait([intruder], timeout=30)[intruder].node
        work.create(member(members[2]))
        # Longer than the gang's timeout (5 s) and the barrier's wait (10 s).
        stuck = work.wait(members, timeout=20)
        assert [m for m in members if stuck[m].node] == [], stuck
        nodes = work.nodes([*members, intruder])
        used = [node for node in nodes.values() if node]
        assert len(used) == len(set(used)), nodes  # one 3-cpu pod a node at most
        work.delete([intruder])
        placed = work.wait(members, timeout=120)
        assert all(placed[m].node for m in members), placed
        assert len({placed[m].node for m in members}) == 3
    finally:
        work.delete([*members, intruder])


def test_pods_that_need_no_exchange_are_scheduled_while_the_extender_is_down(
    cluster: localcluster.ClusterInfo,
) -> None:
    """The extender is in the path of gang members and preferences only: with it stopped,
    plain pods and pods requesting a written-back ephemeral resource keep being placed."""
    work = Workload(api_client(cluster.kubeconfig))
    n = next(_names)
    resource = one_unit_on(cluster, f"down-{n}", None)
    plain, eph = f"down-plain-{n}", f"down-eph-{n}"
    localcluster.stop_component(cluster.dir, "extender")
    try:
        work.create(pod_manifest(plain, requests={"cpu": "100m"}))
        work.create(pod_manifest(eph, limits={resource: "1"}))
        placed = work.wait([plain, eph], timeout=60)
        assert placed[plain].node and placed[eph].node, placed
    finally:
        localcluster.start_component(cluster.dir, "extender", timeout=120)
        work.delete([plain, eph])


def test_a_capacity_decrease_racing_with_binds_never_over_commits(
    cluster: localcluster.ClusterInfo,
) -> None:
    """What a user of the policy API checks: once a PUT has answered 200 (the capacity is on
    the node), no pod bound after it takes the node above that capacity. Pods that request an
    ephemeral resource are kube-scheduler's alone: the ledger learns of them from the pod
    watch, after the bind, so a decrease can be taken while kube-scheduler is placing pods
    against the old capacity. Each round: 12 pods of one unit arrive 8 ms apart for the one
    node that has 12 units, and the capacity is lowered to 2 a few milliseconds in (later each
    round). The decrease is refused (409, below what the ledger saw allocated) or taken. The
    history (every bind and departure from a watch, every accepted capacity from the PUT's
    answer, ordered by the API server's resourceVersion) never shows a node holding more pods
    than the capacity last accepted before their bind, once kube-scheduler's in-flight binds
    are done (over_commits: pods it placed against the old capacity before its cache had the
    new one, bound just after the answer; printed, and the one exception). Above all not as
    those pods leave while others wait for their units: the node shows the capacity asked
    for, not what they hold (raised to what they held, 25 binds refilled freed units in 14
    rounds). Once they are gone the node shows the capacity asked for."""
    api = api_client(cluster.kubeconfig)
    work = Workload(api)
    core = client.CoreV1Api(api)
    n = next(_names)
    node = cluster.nodes[0]
    short = f"race-{n}"
    resource = one_unit_on(cluster, short, node, units=PODS)
    history = PodHistory(core, f"race={short}")
    accepted: list[Step] = []
    assert cluster.extender_url is not None and cluster.token is not None
    try:
        with PolicyClient(cluster.extender_url, cluster.token) as policy:

            def accept(capacity: int) -> int:
                """PUT the capacity; record it as accepted once answered 200."""
                try:
                    result = policy.set_resource(short, capacity, node=node)
                except PolicyAPIError as e:
                    return e.status
                assert result.durable, result  # 200: on the node
                now = time.monotonic()
                accepted.append(Step(fence(core), now, "capacity", str(capacity)))
                return 200

            for r, delay in enumerate(DELAYS):
                names = [f"{short}-{r}-{i}" for i in range(PODS)]
                lowered: list[int] = []

                def lower(delay: float, lowered: list[int] = lowered) -> None:
                    time.sleep(delay)  # pacing: where in the arrivals the decrease lands
                    lowered.append(accept(2))

                # The pods arrive one by one while the decrease is on its way: checked
                # against the allocations the ledger has seen, written as an object, applied,
                # patched onto the node, and seen by kube-scheduler's node watch.
                lowering = threading.Thread(target=lower, args=(delay,))
                lowering.start()
                for name in names:
                    work.create(pod_manifest(name, limits={resource: "1"}, labels={"race": short}))
                    time.sleep(SPACING)  # pacing: the arrivals' spacing
                lowering.join()
                assert lowered in ([200], [409]), lowered
                # Those that can be placed are, and a few more get their chance.
                work.wait(names, timeout=30, bound=2, settle=2.0)
                work.delete(names)  # those waiting get the units of those leaving
                deadline = time.monotonic() + 30
                want = 2 if lowered == [200] else PODS
                while int(core.read_node(node).status.allocatable.get(resource, "0")) != want:
                    assert time.monotonic() < deadline, f"round {r}: the node never showed {want}"
                    time.sleep(0.2)
                assert accept(PODS) == 200
            # The watch has seen every pod go (and so every bind before it).
            created = {f"{short}-{r}-{i}" for r in range(len(DELAYS)) for i in range(PODS)}
            until(lambda: history.gone >= created, "the watch seeing every pod go")
            policy.delete_resource(short)
    finally:
        history.stop()
    assert history.binds() >= 2 * len(DELAYS), history.steps  # the history is not empty
    over, in_flight = over_commits([*history.steps, *accepted], PODS)
    print("bound in flight against the old capacity:", in_flight)  # the product cannot stop them
    assert over == []
