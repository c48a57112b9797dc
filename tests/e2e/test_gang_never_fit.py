"""A gang that can never fit, on the real control plane: its members, created behind the gang
gate, stay held with the reason on their pods and in GET /v1/gangs, untried by kube-scheduler
(no filter call, no scheduling cycle) while the cluster changes in ways that do not help; and
once a node is added that lets it fit, it is planned and bound within seconds, not on
kube-scheduler's retry loop (its members were never in kube-scheduler's queue)."""

from __future__ import annotations

import re
import time
from typing import Any

import builders
import httpx
import pytest
from kubernetes import client

from escher_harness import localcluster
from escher_harness.kubeclient import api_client
from escher_harness.localcluster.fakenodes import NodeShape, create_nodes
from escher_harness.waits import until
from escher_harness.workload import Workload, raw_pods
from extender.core.pod import Keys

pytestmark = [
    pytest.mark.e2e,
    # Three nodes of 2 cpu: the cluster holds 3 members of 2 cpu, never a gang of 4.
    pytest.mark.cluster(nodes=3, mode="extender", scope="every-pod", node_cpu="2"),
]

KEYS = Keys.for_domain("escher.io")
GATE = KEYS.gate
HELD = "escher.io/GangHeld"


def member(gang: str, i: int, size: int, cpu: str, gated: bool = True) -> Any:
    return builders.member(
        gang,
        i,
        size,
        cpu=cpu,
        requests={"memory": "64Mi"},
        timeout=30,
        gates=(GATE,) if gated else (),
    )


def status(info: localcluster.ClusterInfo, key: str) -> dict[str, Any]:
    r = httpx.get(
        f"{info.extender_url}/v1/gangs", headers={"Authorization": f"Bearer {info.token}"}
    )
    r.raise_for_status()
    return next((g for g in r.json() if g["gang"] == key), {})


def filter_calls(info: localcluster.ClusterInfo) -> float:
    text = httpx.get(f"{info.extender_url}/metrics").text
    found = re.search(r"^escher_extender_filter_nodes_count(?:\{[^}]*\})? (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in pod["status"].get("conditions") or [] if c["type"] == kind), {})


def test_a_never_fitting_gang_is_held_with_its_reason_and_bound_once_a_node_lets_it_fit(
    fresh_cluster: localcluster.ClusterInfo,
) -> None:
    info = fresh_cluster
    api = api_client(info.kubeconfig)
    core, work = client.CoreV1Api(api), Workload(api)
    names = [f"never-{i}" for i in range(4)]
    for i in range(4):
        work.create(member("never", i, 4, cpu="2"))
    why = until(
        lambda: "can never fit" in (r := status(info, "default/never").get("reason", "")) and r,
        what="the gang's reason in /v1/gangs",
    )
    # The reason on every member's pod, as `kubectl describe pod` shows it.
    until(
        lambda: all(
            condition(p, HELD).get("message") == why for p in raw_pods(core, names).values()
        ),
        what="the reason on the pods",
    )
    calls = filter_calls(info)
    # A change that cannot help (a node relabelled) plans it again, still never; kube-scheduler
    # would retry an unschedulable pod on such a node event.
    core.patch_node(sorted(info.nodes)[0], {"metadata": {"labels": {"example.com/x": "y"}}})
    time.sleep(3)  # a negative window; the control below shows the same window sees tries
    held = raw_pods(core, names)
    assert all(p["spec"].get("schedulingGates") for p in held.values()), held
    assert all(not p["spec"].get("nodeName") for p in held.values())
    assert all(
        condition(p, "PodScheduled").get("reason") == "SchedulingGated" for p in held.values()
    )
    assert filter_calls(info) == calls, "kube-scheduler tried held members"
    assert {m["state"] for m in status(info, "default/never")["members"]} == {"held"}
    # The positive control: a gang that can never fit created ungated (it requires a rack and
    # no node has one, even the one added below) is tried by kube-scheduler in the same
    # window, seen the same way.
    control = [f"ctl-{i}" for i in range(2)]
    for i in range(2):
        pod = member("ctl", i, 2, cpu="1", gated=False)
        pod["metadata"]["annotations"][KEYS.gang_required_topology] = "rack"
        work.create(pod)
    time.sleep(3)
    tried = raw_pods(core, control)
    assert filter_calls(info) > calls, "the control was not seen tried"
    assert all(
        condition(p, "PodScheduled").get("reason") == "Unschedulable" for p in tried.values()
    ), tried
    work.delete(control)
    # A node added: the gang fits (4 nodes of 2 cpu), and binds at once.
    start = time.monotonic()
    create_nodes(api, ["node-added"], NodeShape(cpu="2", memory="8Gi"))
    placed = work.wait(names, timeout=60)
    took = time.monotonic() - start
    assert all(p.node for p in placed.values()), placed
    assert len({p.node for p in placed.values()}) == 4
    print(f"never-fit gang bound {took:.1f} s after a node was added")
    assert took < 15, took  # the gate plans it in its next turn; no backoff applies
    done = raw_pods(core, names)
    assert all(condition(p, HELD).get("status") == "False" for p in done.values()), done
