"""An EphemeralResource's status (extender.policies.kube.objects.resource_status): per-node
usage listed up to STATUS_NODES_MAX nodes, the totals always, so that a usage refresh of a
resource on thousands of nodes is a small write."""

from __future__ import annotations

import msgspec
import pytest

from extender.policies.kube.objects import STATUS_NODES_MAX, resource_status


def per_node(n: int) -> dict[str, dict[str, int]]:
    return {
        f"node-{i}": {"capacity": 3, "allocated": i % 4 and 1, "available": 3 - (i % 4 and 1)}
        for i in range(n)
    }


@pytest.mark.parametrize(
    ("nodes", "listed"),
    [(0, True), (1, True), (STATUS_NODES_MAX, True), (STATUS_NODES_MAX + 1, False), (5000, False)],
)
def test_the_status_lists_nodes_up_to_the_bound_and_always_the_totals(
    nodes: int, listed: bool
) -> None:
    usage = per_node(nodes)
    status = resource_status(4, usage, [])
    allocated = sum(u["allocated"] for u in usage.values())
    assert status["observedGeneration"] == 4 and status["nodeCount"] == nodes
    assert (status["capacity"], status["allocated"], status["available"]) == (
        3 * nodes,
        allocated,
        3 * nodes - allocated,
    )
    assert status["nodesListed"] is listed
    assert ("nodes" in status) is listed
    if listed:
        assert status["nodes"] == usage


def test_a_large_resources_status_stays_small() -> None:
    # What each usage refresh writes, and each watcher receives: the totals, not 5,000 nodes.
    assert len(msgspec.json.encode(resource_status(1, per_node(5000), []))) < 300
