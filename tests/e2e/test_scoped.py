"""Extender mode scoped to the pods that need the extender, on the real control plane.

The embedded cluster runs kube-scheduler with `managedResources` naming the marker resource
(`ClusterSpec(scoped=True)`, deploy/'s configuration; tests/e2e/test_deploy.py proves the
admission policy that adds the marker). Here: a pod without the marker is scheduled and
bound by kube-scheduler with no exchange with the extender; a pod with it is filtered and
bound by the extender, gangs and ephemeral resources included; NodeResourcesFit ignores the
marker, which no node has; a pod with an ephemeral request but no marker is still held to
the written-back resource by NodeResourcesFit (never over capacity), only without the
extender's say; and what scoping gives up, a gang's reserved place taken by a pod the
extender never saw, costs the gang time, never its all-or-nothing or a node's capacity.
"""

from __future__ import annotations

import itertools
import time

import httpx
import pytest

from escher_harness import localcluster
from escher_harness.kubeclient import api_client
from escher_harness.workload import Workload, pod_manifest
from extender.core.pod import Keys
from extender.esl.client import PolicyClient

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.cluster(nodes=3, node_cpu="4", mode="extender", scoped=True, kwok=False),
]

MARKER = Keys.for_domain("escher.io").marker
_names = itertools.count()


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


def one_unit_on(info: localcluster.ClusterInfo, name: str, node: str) -> str:
    """Sets ephemeral resource `name` to 1 unit on `node`; returns the name pods request."""
    assert info.extender_url is not None and info.token is not None
    with PolicyClient(info.extender_url, info.token) as policy:
        return policy.set_resource(name, 1, node=node).resource


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


def test_marked_pods_go_through_the_extender_gangs_and_ephemeral_resources_too(
    cluster: localcluster.ClusterInfo,
) -> None:
    work = Workload(api_client(cluster.kubeconfig))
    n = next(_names)
    node = cluster.nodes[1]
    resource = one_unit_on(cluster, f"scoped-{n}", node)
    gang = [f"g{n}-{i}" for i in range(2)]
    pods = [
        pod_manifest(
            m,
            requests={"cpu": "1"},
            limits={MARKER: "1"},
            labels={"escher.io/gang": f"g{n}"},
            annotations={"escher.io/gang-min": "2"},
        )
        for m in gang
    ]
    eph = f"eph-{n}"
    pods.append(pod_manifest(eph, limits={resource: "1", MARKER: "1"}))
    before = calls(cluster)
    for p in pods:
        work.create(p)
    names = [*gang, eph]
    try:
        placed = work.wait(names, timeout=60)
        assert all(p.node for p in placed.values()), placed
        assert placed[eph].node == node
        after = calls(cluster)
        # Each marked pod was filtered and bound by the extender (prioritize is skipped
        # when one node is left, as for a gang member passing its reserved node only).
        assert after["filter"] >= before["filter"] + len(names)
        assert after["bind"] == before["bind"] + len(names)
    finally:
        work.delete(names)


def test_an_ephemeral_request_without_the_marker_is_still_held_to_the_nodes_resource(
    cluster: localcluster.ClusterInfo,
) -> None:
    """Without the marker the extender has no say, but NodeResourcesFit checks the
    written-back resource: the pod goes where it is, and a second one waits."""
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
    its bind barrier. An unmarked pod of 3 cpu bypasses the extender and takes the third
    node. The third member then fits nowhere: no member is bound (all or nothing) and no
    node goes over capacity. Once the pod is gone, the gang is planned again and placed."""
    work = Workload(api_client(cluster.kubeconfig))
    n = next(_names)
    members = [f"gb{n}-{i}" for i in range(3)]

    def member(name: str) -> dict[str, object]:
        return pod_manifest(
            name,
            requests={"cpu": "3"},
            limits={MARKER: "1"},
            labels={"escher.io/gang": f"gb{n}"},
            annotations={"escher.io/gang-min": "3", "escher.io/gang-timeout": "5"},
        )

    intruder = f"intruder-{n}"
    try:
        for m in members[:2]:
            work.create(member(m))
        time.sleep(2)  # both reach the bind barrier: the gang is reserved
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
