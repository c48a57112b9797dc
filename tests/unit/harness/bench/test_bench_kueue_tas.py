"""The kueue-tas approach's manifests (escher_harness.bench.approaches.kueue_tas): the Kueue
Topology of the topology preset's levels, a flavor naming it that selects the approach's
nodes, quota for the whole cluster, and one Job per gang whose PodSet carries the gang's
level as the scenario asks. No cluster: tests/e2e/test_kueue.py has Kueue place one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from escher_harness.bench.approaches import kueue_tas
from escher_harness.bench.approaches.base import GangJob
from escher_harness.bench.presets import TOPOLOGY
from escher_harness.bench.scenario import GangArrival
from escher_harness.localcluster.fakenodes import Topology

FOOTING = TOPOLOGY.footing
RACK, BLOCK = "topology.kubernetes.io/rack", "cloud.google.com/gce-topology-block"


def _objects() -> dict[str, dict[str, Any]]:
    return dict(kueue_tas.queue_objects(FOOTING))


def test_the_topology_has_the_nodes_label_keys_widest_first_and_the_hostname_last() -> None:
    levels = [lv["nodeLabel"] for lv in _objects()["topologies"]["spec"]["levels"]]
    node_labels = Topology().labels(0)
    assert levels == [
        "topology.kubernetes.io/zone", BLOCK, RACK, "kubernetes.io/hostname"
    ]  # fmt: skip
    assert set(levels[:-1]) == set(node_labels)


def test_the_flavor_names_the_topology_and_selects_every_node_of_the_approachs_cluster() -> None:
    objects = _objects()
    flavor = objects["resourceflavors"]["spec"]
    assert flavor["topologyName"] == objects["topologies"]["metadata"]["name"]
    spec = kueue_tas.KueueTas().cluster_spec(Path("/nowhere"), FOOTING)
    assert dict(spec.node_labels) == flavor["nodeLabels"]
    assert spec.nodes == FOOTING.nodes and spec.node_topology == FOOTING.topology


def test_the_cluster_queue_has_every_nodes_cpu_and_memory_in_the_flavor() -> None:
    objects = _objects()
    (group,) = objects["clusterqueues"]["spec"]["resourceGroups"]
    (flavor,) = group["flavors"]
    quota = {r["name"]: r["nominalQuota"] for r in flavor["resources"]}
    assert flavor["name"] == objects["resourceflavors"]["metadata"]["name"]
    assert quota == {"cpu": "40000000m", "memory": str(5000 * 32 * 2**30)}  # 5,000 x 8 / 32Gi
    assert (
        objects["localqueues"]["spec"]["clusterQueue"]
        == objects["clusterqueues"]["metadata"]["name"]
    )


@pytest.mark.parametrize(
    ("topology", "size", "annotations"),
    [
        ("", 64, {}),
        ("required", 64, {"kueue.x-k8s.io/podset-required-topology": RACK}),
        ("preferred", 64, {"kueue.x-k8s.io/podset-preferred-topology": RACK}),
        ("required", 512, {"kueue.x-k8s.io/podset-required-topology": BLOCK}),
        ("preferred", 1024, {"kueue.x-k8s.io/podset-preferred-topology": BLOCK}),
    ],
)
def test_a_gang_is_one_queued_job_of_all_its_members_with_its_level_as_asked(
    topology: str, size: int, annotations: dict[str, str]
) -> None:
    level = "rack" if size <= 64 else "block"  # as the preset's shapes give it
    job = GangJob(GangArrival(0.0, "g00001", size, "4", "16Gi", 30.0), 120.0, 60.0,
                  topology=topology, level=level)  # fmt: skip
    body = kueue_tas.gang_job(job, "default-scheduler")
    assert body["metadata"]["name"] == "g00001"  # its pods g00001-..., the recorder's gang
    assert body["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "tas"}
    spec = body["spec"]
    assert spec["parallelism"] == spec["completions"] == size
    template = spec["template"]
    assert template["metadata"]["annotations"] == annotations
    (container,) = template["spec"]["containers"]
    assert container["resources"]["requests"] == {"cpu": "4", "memory": "16Gi"}
    assert template["spec"]["schedulerName"] == "default-scheduler"
    assert template["spec"]["restartPolicy"] == "Never"
