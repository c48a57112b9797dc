"""The gang gate on the real control plane: members created behind `escher.io/gang` are let
through by the extender only once their gang has places, so a gang that does not fit waits
without scheduling cycles (and without the pod condition writes they cost), across a
restart too; the gate of a pod of no gang is lifted at once, and other gates are left."""

from __future__ import annotations

import signal
from typing import Any

import builders
import httpx
import pytest
from kubernetes import client

from escher_harness import localcluster
from escher_harness.kubeclient import api_client
from escher_harness.waits import until
from escher_harness.workload import Workload, pod_manifest, raw_pods

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.cluster(nodes=4, mode="extender", scope="every-pod", node_cpu="2"),
]

GATE = "escher.io/gang"


def member(gang: str, i: int, size: int, cpu: str = "1", gates: tuple[str, ...] = (GATE,)) -> Any:
    return builders.member(
        gang, i, size, cpu=cpu, requests={"memory": "64Mi"}, timeout=20, gates=gates
    )


def gang(info: localcluster.ClusterInfo, key: str) -> dict[str, Any]:
    r = httpx.get(
        f"{info.extender_url}/v1/gangs", headers={"Authorization": f"Bearer {info.token}"}
    )
    r.raise_for_status()
    return next((g for g in r.json() if g["gang"] == key), {})


def gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def gated_at_admission(core: client.CoreV1Api) -> bool:
    """Whether a gang member created now would be gated (a server-side dry run)."""
    probe = core.create_namespaced_pod("default", member("probe", 0, 2, gates=()), dry_run="All")
    return [g.name for g in probe.spec.scheduling_gates or []] == [GATE]


def test_a_held_gang_with_room_is_let_through_and_bound(
    pooled_cluster: localcluster.ClusterInfo,
) -> None:
    api = api_client(pooled_cluster.kubeconfig)
    core, work = client.CoreV1Api(api), Workload(api)
    names = [f"fit-{i}" for i in range(3)]
    for i in range(3):
        work.create(member("fit", i, 3))
    placed = work.wait(names, timeout=30)
    assert all(p.node for p in placed.values()), placed
    assert all(gates(p) == [] for p in raw_pods(core, names).values())


def test_a_held_gang_without_room_waits_untried_across_a_restart_until_room_frees(
    pooled_cluster: localcluster.ClusterInfo,
) -> None:
    api = api_client(pooled_cluster.kubeconfig)
    core, work = client.CoreV1Api(api), Workload(api)
    # Three of the four 2-cpu nodes full: a gang of two 2-cpu members does not fit.
    blockers = [f"block-{i}" for i in range(3)]
    for name in blockers:
        work.create(pod_manifest(name, requests={"cpu": "2"}))
    work.wait(blockers, timeout=30)
    names = ["wait-0", "wait-1"]
    for i in range(2):
        work.create(member("wait", i, 2, cpu="2"))
    status = until(lambda: gang(pooled_cluster, "default/wait").get("reason"), what="gang learnt")
    assert "does not fit now" in status
    # The positive control: a pod of no gang behind the same gate, created now, is let
    # through at once, tried and bound by kube-scheduler (to the node left free). Members
    # let through when their gang was learnt would have been queued before it, and tried
    # first.
    control = "wait-control"
    work.create(pod_manifest(control, requests={"cpu": "1"}, scheduling_gates=(GATE,)))
    assert work.wait([control], timeout=30)[control].node, "the control was never bound"
    work.delete([control])  # it would take the room the gang waits for
    for p in raw_pods(core, names).values():
        assert gates(p) == [GATE] and not p["spec"].get("nodeName")
        (cond,) = [c for c in p["status"]["conditions"] if c["type"] == "PodScheduled"]
        assert cond["reason"] == "SchedulingGated", cond  # never tried: nothing written
    assert {m["state"] for m in gang(pooled_cluster, "default/wait")["members"]} == {"held"}
    # Held state lives in the pods: a killed extender comes back to the same gang.
    localcluster.restart_component(pooled_cluster.dir, "extender", kill_signal=signal.SIGKILL)
    until(lambda: gang(pooled_cluster, "default/wait").get("phase") == "waiting", what="relearnt")
    assert all(gates(p) == [GATE] for p in raw_pods(core, names).values())
    work.delete(blockers[:1])
    placed = work.wait(names, timeout=30)
    assert all(p.node for p in placed.values()), placed


def test_the_gate_of_a_pod_of_no_gang_is_lifted_and_other_gates_stay(
    pooled_cluster: localcluster.ClusterInfo,
) -> None:
    api = api_client(pooled_cluster.kubeconfig)
    core, work = client.CoreV1Api(api), Workload(api)
    work.create(pod_manifest("stray", requests={"cpu": "1"}, scheduling_gates=(GATE,)))
    both = pod_manifest("both", requests={"cpu": "1"}, scheduling_gates=("example.com/x", GATE))
    work.create(both)
    assert work.wait(["stray"], timeout=30)["stray"].node
    left = until(
        lambda: gates(raw_pods(core, ["both"])["both"]) == ["example.com/x"], what="lifted"
    )
    assert left and not raw_pods(core, ["both"])["both"]["spec"].get("nodeName")


@pytest.mark.cluster(gang_gate=True)
def test_the_adaptive_gate_holds_new_gangs_only_while_gangs_wait_for_room(
    fresh_cluster: localcluster.ClusterInfo,
) -> None:
    """deploy/'s gang-gate admission policy and the extender's switch: members created
    while every gang fits are not gated; once a gang waits for room, new members are; the
    switch opens again a cool-down after the last gang found room."""
    info = fresh_cluster
    api = api_client(info.kubeconfig)
    core, work = client.CoreV1Api(api), Workload(api)

    def hold() -> str:
        try:
            return str(core.read_namespaced_config_map("escher-gang-gate", "default").data["hold"])
        except client.ApiException as e:
            assert e.status == 404
            return ""

    def create(gang: str, size: int, cpu: str) -> list[str]:
        names = []
        for i in range(size):
            created = core.create_namespaced_pod("default", member(gang, i, size, cpu, gates=()))
            names.append(created.metadata.name)
        return names

    until(lambda: hold() == "false", what="the switch written open")
    fits = create("fits", 2, "1")
    assert all(gates(p) == [] for p in raw_pods(core, fits).values())
    assert all(p.node for p in work.wait(fits, timeout=30).values())
    work.delete(fits)
    blockers = [f"block-{i}" for i in range(3)]
    for name in blockers:
        work.create(pod_manifest(name, requests={"cpu": "2"}))
    work.wait(blockers, timeout=30)
    short = create("short", 2, "2")  # does not fit: the switch closes
    until(lambda: hold() == "true", what="the switch held")
    # The API server's policy parameters follow a watch: until it has the switch, a member
    # is admitted ungated (a dry run is admitted as a creation would be, and not stored).
    until(lambda: gated_at_admission(core), what="the admission policy gating members")
    later = create("later", 2, "2")
    assert all(gates(p) == [GATE] for p in raw_pods(core, later).values())
    work.delete(blockers)
    placed = work.wait(short + later, timeout=30)
    assert all(p.node for p in placed.values()), placed
    until(lambda: hold() == "false", timeout=30, what="the switch open after the cool-down")
