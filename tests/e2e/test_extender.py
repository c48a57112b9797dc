"""The extender end to end on the real local control plane, in both modes.

extender mode: kube-scheduler asks the extender (filter/prioritize/bind) and leaves the
escher.io domain to it. pure mode: kube-scheduler alone enforces the written-back extended
resources. The same assertions hold for both: that is the point of one ledger for two modes.
"""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import httpx
import pytest
from builders import cluster_of

from escher_harness import localcluster
from escher_harness.kubeclient import api_client
from escher_harness.workload import Placement, Workload, pod_manifest
from extender.esl.client import PolicyAPIError, PolicyClient

MODES = ["extender", "pure"]

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.cluster(nodes=4, node_labels={"pool": "general"}),
    pytest.mark.parametrize("cluster", [cluster_of(m) for m in MODES], ids=MODES, indirect=True),
]
_names = itertools.count()


class Env:
    def __init__(self, info: localcluster.ClusterInfo) -> None:
        assert info.extender_url and info.token
        self.info = info
        self.policy = PolicyClient(info.extender_url, info.token)
        self.work = Workload(api_client(info.kubeconfig))
        self.domain = info.resource_domain

    def pods(self, resource: str, n: int, per_pod: int = 1) -> list[str]:
        names = [f"p{next(_names)}" for _ in range(n)]
        for name in names:
            self.work.create(pod_manifest(name, limits={resource: str(per_pod)}))
        return names

    def on_node(self, node: str) -> dict[str, dict[str, str]]:
        return self.work.node_resources(node, self.domain + "/")


@pytest.fixture(scope="module")
def env(cluster: localcluster.ClusterInfo) -> Env:
    return Env(cluster)


def by_node(placed: dict[str, Placement]) -> Counter[str]:
    return Counter(p.node for p in placed.values() if p.node)


def test_pods_land_only_where_the_resource_is_and_never_beyond_capacity(env: Env) -> None:
    r = env.policy.set_resource("fit-a", 2, node="node-1").resource
    env.policy.set_resource("fit-a", 1, node="node-3")
    names = env.pods(r, 5)
    placed = env.work.wait(names, timeout=60, bound=3, settle=3.0)
    assert by_node(placed) == {"node-1": 2, "node-3": 1}
    pending = [p for p in placed.values() if not p.node]
    assert len(pending) == 2
    for p in pending:
        assert r in p.reason, p.reason  # the reason names the resource
    # and the ledger agrees with the API server
    usage = env.policy.get_resource("fit-a").nodes
    assert {n: u.allocated for n, u in usage.items()} == {"node-1": 2, "node-3": 1}


def test_written_back_values_are_on_the_nodes(env: Env) -> None:
    r = env.policy.set_resource("wb", 3, node_selector={"pool": "general"}, num_nodes=2).resource
    assert env.on_node("node-0") == {"capacity": {r: "3"}, "allocatable": {r: "3"}}
    assert env.on_node("node-1")["capacity"][r] == "3"
    assert r not in env.on_node("node-2")["capacity"]
    env.policy.set_resource("wb", 0, node="node-0")
    assert r not in env.on_node("node-0")["allocatable"]
    env.policy.delete_resource("wb")
    assert r not in env.on_node("node-1")["capacity"]


def test_raising_capacity_at_runtime_lets_pending_pods_in(env: Env) -> None:
    r = env.policy.set_resource("grow", 1, node="node-2").resource
    names = env.pods(r, 3)
    placed = env.work.wait(names, timeout=60, bound=1, settle=2.0)
    assert by_node(placed) == {"node-2": 1}
    env.policy.set_resource("grow", 3, node="node-2")
    placed = env.work.wait(names, timeout=60)
    assert by_node(placed) == {"node-2": 3}


def test_many_pods_at_once_do_not_overcommit(env: Env) -> None:
    caps = {"node-0": 3, "node-1": 2, "node-2": 4}
    for node, cap in caps.items():
        r = env.policy.set_resource("burst", cap, node=node).resource
    names = env.pods(r, 30)
    placed = env.work.wait(names, timeout=90, bound=sum(caps.values()), settle=5.0)
    assert by_node(placed) == caps
    assert sum(1 for p in placed.values() if not p.node) == 30 - sum(caps.values())


def test_multi_unit_pods_and_unsatisfiable_requests(env: Env) -> None:
    r = env.policy.set_resource("big", 3, node="node-3").resource
    names = env.pods(r, 2, per_pod=2)  # only one of the two fits in 3 units
    placed = env.work.wait(names, timeout=60, bound=1, settle=2.0)
    assert by_node(placed) == {"node-3": 1}
    too_big = env.pods(r, 1, per_pod=4)  # can never fit anywhere
    placed = env.work.wait(too_big, timeout=10, bound=0, settle=2.0)
    assert placed[too_big[0]].node is None and r in placed[too_big[0]].reason


def test_policy_refusals_leave_nodes_untouched(env: Env) -> None:
    r = env.policy.set_resource("keep", 2, node="node-0").resource
    names = env.pods(r, 2)
    env.work.wait(names, timeout=60)
    before = env.on_node("node-0")
    for call, status in [
        (lambda: env.policy.set_resource("keep", 1, node="node-0"), 409),  # below allocated
        (lambda: env.policy.set_resource("keep", 5, node="nope"), 404),
        (lambda: env.policy.set_resource("keep", 5, node_selector={"pool": "x"}), 422),
    ]:
        with pytest.raises(PolicyAPIError) as e:
            call()
        assert e.value.status == status
    assert env.on_node("node-0") == before


def test_extender_mode_decides_through_the_extender(env: Env) -> None:
    metrics = httpx.get(f"{env.info.extender_url}/metrics").text
    filters = _sample(metrics, 'escher_extender_request_seconds_count{verb="filter"}')
    binds = _sample(metrics, 'escher_extender_request_seconds_count{verb="bind"}')
    if env.info.mode == "extender":
        assert filters > 0 and binds > 0
    else:  # pure mode: kube-scheduler never calls the service
        assert filters == 0 and binds == 0


def _sample(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def test_cluster_json_records_the_service(env: Env) -> None:
    recorded = Path(env.info.dir, "cluster.json").read_text()
    assert env.info.extender_url in recorded and env.info.token in recorded  # type: ignore[operator]
