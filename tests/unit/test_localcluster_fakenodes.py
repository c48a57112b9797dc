"""The fake nodes the local control plane creates (escher_harness.localcluster.fakenodes)."""

from __future__ import annotations

import pytest

from escher_harness.localcluster.fakenodes import (
    FAKE_NODE_ANNOTATION,
    NodeShape,
    Topology,
    node_index,
    node_manifest,
)
from extender.gang.topology import DEFAULT, parse


def test_node_manifest() -> None:
    shape = NodeShape(
        cpu="8",
        memory="16Gi",
        pods="50",
        labels={"zone": "a"},
        extended_resources={"example.com/gpu": "2"},
    )
    node = node_manifest("node-7", shape)
    assert node["metadata"] == {
        "name": "node-7",
        "labels": {"zone": "a", "kubernetes.io/hostname": "node-7"},
        "annotations": {FAKE_NODE_ANNOTATION: "true"},  # what kwok manages
    }
    expected = {"cpu": "8", "memory": "16Gi", "pods": "50", "example.com/gpu": "2"}
    assert node["status"]["capacity"] == node["status"]["allocatable"] == expected
    (ready,) = node["status"]["conditions"]
    assert (ready["type"], ready["status"]) == ("Ready", "True")
    assert "spec" not in node  # no taints, schedulable


def test_hostname_label_cannot_be_overridden() -> None:
    node = node_manifest("node-0", NodeShape(labels={"kubernetes.io/hostname": "other"}))
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "node-0"


# --- topology labels ---------------------------------------------------------------------

ZONE, BLOCK, RACK = (
    "topology.kubernetes.io/zone",
    "cloud.google.com/gce-topology-block",
    "topology.kubernetes.io/rack",
)


@pytest.mark.parametrize(
    ("layout", "index", "zone", "block", "rack"),
    [
        # racks of 32, blocks of 16 racks (512 nodes), zones of 4 blocks (2,048 nodes)
        (Topology(), 0, "zone-0", "block-00", "rack-000"),
        (Topology(), 31, "zone-0", "block-00", "rack-000"),
        (Topology(), 32, "zone-0", "block-00", "rack-001"),
        (Topology(), 511, "zone-0", "block-00", "rack-015"),
        (Topology(), 512, "zone-0", "block-01", "rack-016"),
        (Topology(), 2047, "zone-0", "block-03", "rack-063"),
        (Topology(), 2048, "zone-1", "block-04", "rack-064"),
        (Topology(), 4999, "zone-2", "block-09", "rack-156"),  # the last, partial rack
        (
            Topology(rack_nodes=2, racks_per_block=2, blocks_per_zone=1),
            5,
            "zone-1",
            "block-01",
            "rack-002",
        ),
        (
            Topology(rack_nodes=1, racks_per_block=1, blocks_per_zone=1),
            3,
            "zone-3",
            "block-03",
            "rack-003",
        ),
    ],
)
def test_topology_labels_by_index(
    layout: Topology, index: int, zone: str, block: str, rack: str
) -> None:
    assert layout.labels(index) == {ZONE: zone, BLOCK: block, RACK: rack}
    assert layout.domains(index) == {"zone": zone, "block": block, "rack": rack}


def test_the_keys_are_the_default_hierarchys() -> None:
    keys = {lv.name: lv.key for lv in parse(DEFAULT).levels}
    assert set(Topology().labels(0)) == {keys["zone"], keys["block"], keys["rack"]}


def test_topology_labels_go_on_the_manifest_beside_the_shapes() -> None:
    node = node_manifest("node-40", NodeShape(labels={"a": "b"}), Topology().labels(40))
    assert node["metadata"]["labels"] == {
        "a": "b",
        ZONE: "zone-0",
        BLOCK: "block-00",
        RACK: "rack-001",
        "kubernetes.io/hostname": "node-40",
    }
    assert node_index("node-40") == 40


def test_nodes_per_domain_and_bad_layouts() -> None:
    t = Topology(rack_nodes=32, racks_per_block=16, blocks_per_zone=4)
    assert [t.nodes_per_domain(lv) for lv in ("host", "rack", "block", "zone")] == [
        1,
        32,
        512,
        2048,
    ]
    with pytest.raises(ValueError, match="at least one"):
        Topology(rack_nodes=0)
