"""Gang scheduling on the real control plane: the extender approach (all-or-nothing under
contention, no deadlock, expired reservations released) and the pure approach (a gang that
cannot complete is rolled back with no stray resources left on the nodes, a gang requiring a
rack lands in one)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import builders
import httpx
import pytest
from kubernetes import client as k8s

from escher_harness import localcluster
from escher_harness.bench.puregang import GangRequest, PureGang
from escher_harness.kubeclient import api_client
from escher_harness.waits import scheduling_attempts, until
from escher_harness.workload import PodChange, Workload, pod_manifest
from extender.esl.client import PolicyClient

pytestmark = pytest.mark.e2e


# Two clusters from the pool (pooled_cluster), one per approach, for all the module's tests:
# a test's pods are deleted after it, and each leaves no resource or reservation behind,
# which each asserts.
ON_EXTENDER = pytest.mark.cluster(nodes=3, mode="extender", scope="every-pod", node_cpu="4")
ON_PURE = pytest.mark.cluster(nodes=4, mode="pure", node_cpu="4")
RACK = "topology.kubernetes.io/rack"

POKE = "test.escher.io/poked-after"  # an annotation touched so kube-scheduler retries a pod


def member(gang: str, i: int, size: int, cpu: str, timeout: float = 60) -> dict[str, Any]:
    return builders.member(gang, i, size, cpu=cpu, requests={"memory": "128Mi"}, timeout=timeout)


class Recorder:
    """Every pod bind and bound-pod deletion, from a watch, while the test runs."""

    def __init__(self, work: Workload) -> None:
        self.changes: list[PodChange] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=work.watch, args=(self.stop, self.changes.append))
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)

    def partial_stretches(self, size: int) -> dict[str, float]:
        """Per gang, the longest time it had 0 < bound < size members (never after it was
        once complete: that is its teardown)."""
        bound: dict[str, int] = defaultdict(int)
        since: dict[str, float] = {}
        done: set[str] = set()
        longest: dict[str, float] = defaultdict(float)
        for c in sorted(self.changes, key=lambda c: c.t):
            g = c.labels.get("escher.io/gang", "")
            if not g:
                continue
            bound[g] += -1 if c.deleted else 1
            if bound[g] >= size:
                done.add(g)
            partial = g not in done and 0 < bound[g] < size
            if partial and g not in since:
                since[g] = c.t
            elif not partial and g in since:
                longest[g] = max(longest[g], c.t - since.pop(g))
        for g, t in since.items():  # still partial at the end
            longest[g] = max(longest[g], time.time() - t)
        return dict(longest)


@ON_EXTENDER
def test_extender_gangs_under_contention_are_all_or_nothing_and_never_deadlock(
    pooled_cluster: localcluster.ClusterInfo,
) -> None:
    work = Workload(api_client(pooled_cluster.kubeconfig))
    core = k8s.CoreV1Api(api_client(pooled_cluster.kubeconfig))
    rec = Recorder(work)
    try:
        # Three gangs of 4 x 2 cpu on 12 cpu: any one fits, no two at once.
        gangs = {g: [f"{g}-{i}" for i in range(4)] for g in ("a", "b", "c")}
        for i in range(4):  # interleaved, as competing jobs would arrive
            for g in gangs:
                work.create(member(g, i, 4, "2"))
        done: list[str] = []
        for _ in gangs:
            deadline = time.monotonic() + 90
            while True:
                placed = work.placements([n for names in gangs.values() for n in names])
                counts = {
                    g: sum(1 for n in names if placed[n].node)
                    for g, names in gangs.items()
                    if g not in done
                }
                complete = [g for g, c in counts.items() if c == 4]
                if complete:
                    break
                assert time.monotonic() < deadline, f"no gang completed: {counts}"
                time.sleep(0.2)
            g = complete[0]
            # Give the others every chance to grab a place wrongly, and see that they had it:
            # each of their members is touched (a pod update, as the extender's waker sends,
            # requeues a pod an extender turned away), and kube-scheduler tries each again
            # and finds it unschedulable.
            others = [n for o, names in gangs.items() if o not in done and o != g for n in names]
            pending = len(others)
            want = scheduling_attempts(pooled_cluster, "unschedulable") + pending
            for n in others:
                core.patch_namespaced_pod(n, "default", {"metadata": {"annotations": {POKE: g}}})
            started = time.monotonic()
            until(
                lambda want=want: scheduling_attempts(pooled_cluster, "unschedulable") >= want,
                f"kube-scheduler trying the {pending} members of the other gangs again",
            )
            print(f"\nthe others tried again within {time.monotonic() - started:.1f}s")
            placed = work.placements([n for names in gangs.values() for n in names])
            for other, names in gangs.items():
                if other not in done and other != g:
                    assert not any(placed[n].node for n in names), f"{other} partly bound"
            done.append(g)
            work.delete(gangs[g])  # the job finishes; the next gang must now complete
        assert sorted(done) == ["a", "b", "c"]
    finally:
        rec.close()
    stretches = rec.partial_stretches(4)
    # Members bind one Binding at a time, so a watch can see a gang mid-way through the
    # burst of its binds; that burst is all: never a gang left waiting half bound.
    assert stretches and max(stretches.values()) < 1.0, stretches


@ON_EXTENDER
def test_extender_releases_expired_reservations(
    pooled_cluster: localcluster.ClusterInfo,
) -> None:
    assert pooled_cluster.extender_url and pooled_cluster.token
    work = Workload(api_client(pooled_cluster.kubeconfig))
    work.create(member("x", 0, 2, "1", timeout=3))
    # x-0 is seen and waits for its gang; then it goes away before x-1 arrives, so the
    # reservation made when x-1 arrives can never complete.
    deadline = time.monotonic() + 30
    while not work.placements(["x-0"])["x-0"].reason:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    work.delete(["x-0"])
    work.create(member("x", 1, 2, "1", timeout=3))
    policy = httpx.Client(
        base_url=pooled_cluster.extender_url,
        headers={"Authorization": f"Bearer {pooled_cluster.token}"},
    )
    deadline = time.monotonic() + 60
    while True:
        gang = next(g for g in policy.get("/v1/gangs").json() if g["gang"] == "default/x")
        if gang["timeouts"] >= 1 and gang["phase"] == "waiting":
            break
        assert time.monotonic() < deadline, gang
        time.sleep(0.5)
    assert gang["reservations"] >= 1
    assert not any(m["state"] == "bound" for m in gang["members"])
    # nothing is held any more: the cpu is free on every node
    state = PolicyClient(pooled_cluster.extender_url, pooled_cluster.token).cluster_state()
    assert all(res["cpu"].allocated == 0 for res in state.nodes.values())
    assert work.placements(["x-1"])["x-1"].node is None


@ON_PURE
def test_pure_gang_that_cannot_complete_is_rolled_back_leaving_nothing(
    pooled_cluster: localcluster.ClusterInfo,
) -> None:
    info = pooled_cluster
    assert info.extender_url and info.token
    work = Workload(api_client(info.kubeconfig))
    events: list[str] = []

    def unplaceable(name: str, **kw: Any) -> dict[str, Any]:
        m = pod_manifest(name, **kw)
        m["spec"]["nodeSelector"] = {"no-such-label": "x"}  # never binds
        return m

    with PolicyClient(info.extender_url, info.token) as policy:
        gang = PureGang(
            policy, work, manifest=unplaceable, on_event=lambda kind, g: events.append(kind)
        )
        r = gang.run(GangRequest("stuck", 3, attempt_timeout=2, deadline=7, backoff=0.5))
        assert not r.completed and r.rollbacks >= 2 and events.count("rollback") == r.rollbacks
        assert "did not complete within 7s" in r.reason
        # no stray resources: not in the ledger, not on any Node object
        state = policy.cluster_state()
        assert not any(k.startswith("escher.io/") for res in state.nodes.values() for k in res)
    for node in info.nodes:
        assert work.node_resources(node, "escher.io/") == {"capacity": {}, "allocatable": {}}
    leftovers = work.placements([f"stuck-{a}-{i}" for a in range(1, 10) for i in range(3)])
    assert leftovers == {}  # every attempt's pods were deleted


@ON_PURE
@pytest.mark.parametrize("placeholders", [False, True], ids=["plan", "placeholders"])
def test_pure_gang_completes_and_removes_its_resource(
    pooled_cluster: localcluster.ClusterInfo, placeholders: bool
) -> None:
    info = pooled_cluster
    assert info.extender_url and info.token
    work = Workload(api_client(info.kubeconfig))
    with PolicyClient(info.extender_url, info.token) as policy:
        gang = PureGang(policy, work, placeholders=placeholders)
        r = gang.run(GangRequest("ok", 3, cpu="1", attempt_timeout=20))
        assert r.completed and r.rollbacks == 0
        placed = work.placements(r.pods)
        assert all(p.node for p in placed.values())
        # The placeholders made way for the members: none is left.
        assert work.placements([f"ok-1-ph{i}" for i in range(3)]) == {}
    for node in info.nodes:
        assert work.node_resources(node, "escher.io/") == {"capacity": {}, "allocatable": {}}


@ON_PURE
def test_pure_gang_with_a_required_rack_lands_in_one_rack(
    pooled_cluster: localcluster.ClusterInfo,
) -> None:
    info = pooled_cluster
    assert info.extender_url and info.token
    api = api_client(info.kubeconfig)
    racks = {n: f"r{i // 2}" for i, n in enumerate(sorted(info.nodes))}
    try:
        for node, rack in racks.items():
            k8s.CoreV1Api(api).patch_node(node, {"metadata": {"labels": {RACK: rack}}})
        work = Workload(api)
        with PolicyClient(info.extender_url, info.token) as policy:
            deadline = time.monotonic() + 20
            while not all(policy.cluster_state().labels.get(n, {}).get(RACK) for n in racks):
                assert time.monotonic() < deadline, "the service never saw the rack labels"
                time.sleep(0.2)
            # 3 members of 2 cpu need two 4-cpu nodes: one rack's both, or it is broken.
            r = PureGang(policy, work).run(
                GangRequest("rk", 3, cpu="2", attempt_timeout=20, required_topology="rack")
            )
            assert r.completed, r.reason
            nodes = {p.node for p in work.placements(r.pods).values()}
            assert len(nodes) == 2 and len({racks[n] for n in nodes if n}) == 1
    finally:  # the cluster as the pool gave it
        for node in racks:
            k8s.CoreV1Api(api).patch_node(node, {"metadata": {"labels": {RACK: None}}})


@ON_EXTENDER
def test_the_documented_example_gang_is_placed_whole(
    pooled_cluster: localcluster.ClusterInfo,
) -> None:
    import yaml

    doc = yaml.safe_load((Path(__file__).parents[2] / "docs/examples/gang.yaml").read_text())
    work = Workload(api_client(pooled_cluster.kubeconfig))
    for pod in doc["items"]:
        work.create(pod)
    names = [p["metadata"]["name"] for p in doc["items"]]
    placed = work.wait(names, timeout=60)
    assert all(p.node for p in placed.values()), placed
