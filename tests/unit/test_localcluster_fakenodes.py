"""The fake nodes the local control plane creates (escher_harness.localcluster.fakenodes)."""

from __future__ import annotations

from escher_harness.localcluster.fakenodes import FAKE_NODE_ANNOTATION, NodeShape, node_manifest


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
