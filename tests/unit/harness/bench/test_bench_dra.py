"""Mode dra in the benchmarks, without a cluster: API writes per pod read from kube-apiserver's
metrics, the dra/pure ratios and the new tables of bench extender's summary, the
set_resource-to-schedulable summary, mode dra's over-commit check from ResourceSlices and
ResourceClaims, and the gang bench's dra approach."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from escher_harness.bench import apimetrics, approaches, dracheck, gang_report, throughput
from escher_harness.bench import extender_summary as es

METRICS = """\
# HELP apiserver_request_total Counter of apiserver requests
apiserver_request_total{code="201",component="apiserver",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 100
apiserver_request_total{code="200",component="apiserver",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 40
apiserver_request_total{code="409",component="apiserver",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 2
apiserver_request_total{code="201",component="apiserver",group="resource.k8s.io",resource="resourceclaims",scope="resource",subresource="",verb="POST",version="v1"} 50
apiserver_request_total{code="201",component="apiserver",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 30
apiserver_request_total{code="200",component="apiserver",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 9
apiserver_request_total{code="200",component="apiserver",group="",resource="pods",scope="resource",subresource="",verb="LIST",version="v1"} 77
apiserver_request_total{code="200",component="apiserver",group="",resource="nodes",scope="resource",subresource="",verb="WATCH",version="v1"} 3
"""  # noqa: E501


@pytest.mark.parametrize(
    ("ignored", "expected"),
    [
        # The gang bench's default: events and leases left out.
        (
            None,
            {"PATCH pods/status": 42, "POST pods/binding": 100, "POST resourceclaims": 50},
        ),
        # The throughput bench's: events count (one per placed pod), leases do not.
        (
            apimetrics.LEASES_ONLY,
            {
                "PATCH pods/status": 42,
                "POST events": 30,
                "POST pods/binding": 100,
                "POST resourceclaims": 50,
            },
        ),
    ],
)
def test_write_counts_keep_mutating_verbs_by_request(
    ignored: frozenset[str] | None, expected: dict[str, int]
) -> None:
    got = (
        apimetrics.parse_write_counts(METRICS)
        if ignored is None
        else apimetrics.parse_write_counts(METRICS, ignored)
    )
    assert got == expected


@pytest.mark.parametrize(
    ("writes", "pods", "per_pod", "by_resource"),
    [
        ({}, 10, 0.0, {}),
        ({"POST pods/binding": 10, "POST events": 10}, 10, 2.0, {"events": 1, "pods/binding": 1}),
        (
            {"POST resourceclaims": 10, "PUT resourceclaims": 10, "PUT resourceclaims/status": 10},
            10,
            3.0,
            {"resourceclaims": 2, "resourceclaims/status": 1},
        ),
        ({"POST pods/binding": 1}, 3, 0.333, {"pods/binding": 0.333}),
    ],
)
def test_writes_per_pod_total_and_by_resource(
    writes: dict[str, int], pods: int, per_pod: float, by_resource: dict[str, float]
) -> None:
    got = apimetrics.per_pod(writes, pods)
    assert got["per_pod"] == per_pod
    assert got["by_resource"] == by_resource
    assert got["total"] == sum(writes.values())
    assert set(got["by_request"]) == set(writes)


def test_writes_per_pod_need_a_pod() -> None:
    with pytest.raises(ValueError):
        apimetrics.per_pod({"POST pods/binding": 1}, 0)


def test_the_throughput_window_writes_are_a_difference_of_two_readings() -> None:
    before = apimetrics.parse_write_counts(METRICS, apimetrics.LEASES_ONLY)
    after = dict(before, **{"POST pods/binding": 150, "POST resourceclaims/status": 5})
    assert apimetrics.difference(after, before) == {
        "POST pods/binding": 50,
        "POST resourceclaims/status": 5,
    }


# --- bench extender's summary --------------------------------------------------------------


def row(
    rep: int, mode: str, pps: float, writes: float, workload: str = "ephemeral"
) -> dict[str, Any]:
    cpu = {"kube-scheduler": 2.0, "kube-apiserver": 3.0, "etcd": 1.0}
    if mode == "dra":
        cpu["kube-controller-manager"] = 0.5
    return {
        "rep": rep,
        "mode": mode,
        "workload": workload,
        "nodes": 100,
        "pods_per_s": pps,
        "cpu_ms_per_pod": cpu,
        "scheduler": {
            "algorithm_ms_per_pod": 1.0,
            "outside_framework_ms_per_pod": 0.1,
            "client_rate_limiter_wait_s": 0.5 if mode == "dra" else 0.0,
            "batch_hint_used_share": 0.0 if mode == "dra" else 0.75,
        },
        "extender": None,
        "apiserver_binding_ms": {"p50": 3.0},
        "api_writes": {
            "per_pod": writes,
            "by_request": {"POST pods/binding": 1.0, "POST events": writes - 1.0},
        },
        "over_capacity": [],
    }


@pytest.mark.parametrize(
    ("workload", "rows", "key", "ratio", "write_ratio"),
    [
        # Ephemeral and prefer pods: dra against pure, within each repetition.
        (
            "ephemeral",
            [
                row(0, "pure", 100, 2),
                row(0, "dra", 50, 7),
                row(1, "pure", 80, 2),
                row(1, "dra", 60, 7),
            ],
            "dra/pure",
            {"n": 2, "median": 0.625, "min": 0.5, "max": 0.75},
            {"n": 2, "median": 3.5, "min": 3.5, "max": 3.5},
        ),
        (
            "prefer",
            [row(0, "pure", 100, 2, "prefer"), row(0, "dra", 25, 8, "prefer")],
            "dra/pure",
            {"n": 1, "median": 0.25, "min": 0.25, "max": 0.25},
            {"n": 1, "median": 4.0, "min": 4.0, "max": 4.0},
        ),
        # Plain pods: against kube-scheduler alone.
        (
            "plain",
            [row(0, "none", 100, 2, "plain"), row(0, "dra", 90, 2, "plain")],
            "dra/none",
            {"n": 1, "median": 0.9, "min": 0.9, "max": 0.9},
            {"n": 1, "median": 1.0, "min": 1.0, "max": 1.0},
        ),
    ],
)
def test_dra_is_compared_within_each_repetition(
    workload: str,
    rows: list[dict[str, Any]],
    key: str,
    ratio: dict[str, float],
    write_ratio: dict[str, float],
) -> None:
    (s,) = es.summarize(rows)
    assert s["workload"] == workload
    assert s["ratios"][key] == ratio
    assert s["write_ratios"][key] == write_ratio


def test_the_tables_carry_writes_per_pod_and_the_controller_managers_cpu() -> None:
    summary = es.summarize([row(0, "pure", 100, 2), row(0, "dra", 50, 7)])
    text = es.throughput_tables(summary)
    assert "| writes/pod | writes ratio |" in text
    assert "| 100 | ephemeral | dra | 50.0 | 0.50 | 7.00 | 3.50 | 0 |" in text
    assert "kube-controller-manager" in text
    assert "| 100 | ephemeral | dra | - | 2.00 | 3.00 | 1.00 | 0.50 |" in text
    # How long kube-scheduler's requests waited for its client's QPS budget.
    # ... and the share of pods placed on opportunistic batching's hint.
    assert "| 100 | ephemeral | dra | 1.00 | 0.10 |  | 0.50 | 0.00 |" in text
    assert "| 100 | ephemeral | pure | 1.00 | 0.10 |  | 0.00 | 0.75 |" in text
    writes = es.writes_table(summary)
    assert (
        writes.splitlines()[0]
        == "| nodes | pods | mode | total | POST events | POST pods/binding |"
    )
    assert "| 100 | ephemeral | dra | 7.00 | 6.00 | 1.00 |" in writes


def trial(mode: str, first: float, last: float | None, nodes: int = 100) -> dict[str, Any]:
    return {"mode": mode, "nodes": nodes, "first_s": first, "all_s": last, "set_call_s": 0.1}


@pytest.mark.parametrize(
    ("trials", "expected"),
    [
        (
            [trial("dra", 0.5, 1.0), trial("dra", 0.3, 2.0), trial("dra", 0.4, 1.5)],
            [("dra", 3, 0, {"n": 3, "median": 0.4, "min": 0.3, "max": 0.5}, 1.5)],
        ),
        # A trial whose pods were not all bound: counted apart, no last bind.
        (
            [trial("pure", 0.2, None), trial("pure", 0.4, 0.9)],
            [("pure", 2, 1, {"n": 2, "median": 0.3, "min": 0.2, "max": 0.4}, 0.9)],
        ),
        # Per mode, sorted.
        (
            [trial("pure", 0.2, 0.3), trial("dra", 1.0, 2.0)],
            [
                ("dra", 1, 0, {"n": 1, "median": 1.0, "min": 1.0, "max": 1.0}, 2.0),
                ("pure", 1, 0, {"n": 1, "median": 0.2, "min": 0.2, "max": 0.2}, 0.3),
            ],
        ),
        ([], []),
    ],
)
def test_the_wake_trials_are_summarised_per_size_and_mode(
    trials: list[dict[str, Any]], expected: list[tuple[Any, ...]]
) -> None:
    got = es.wake_summary(trials)
    assert [
        (s["mode"], s["trials"], s["not_all_bound"], s["first_s"], s["all_s"]["median"])
        for s in got
    ] == expected
    if got:
        text = es.wake_table(got)
        assert text.splitlines()[0].startswith("| nodes | mode | trials | first bound s |")


def test_dra_runs_every_workload_and_the_wake_trials() -> None:
    assert throughput.kinds("dra") == ("plain", "ephemeral", "prefer")
    assert "dra" in throughput.ALL_MODES and "dra" in throughput.WAKE_MODES
    assert "none" not in throughput.WAKE_MODES
    assert "kube-controller-manager" in es.COMPONENTS


# --- mode dra's over-commit check ----------------------------------------------------------

DRIVER, LABEL = "escher.io", "escher.io/resource"


def slice_(
    node: str, resource: str, devices: int, index: int = 0, generation: int = 1, count: int = 1
) -> dict[str, Any]:
    first = index * 128
    return {
        "metadata": {"labels": {LABEL: resource}},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {
                "name": f"{node}/{resource}/{index}",
                "generation": generation,
                "resourceSliceCount": count,
            },
            "devices": [{"name": f"u{first + k}"} for k in range(devices)],
        },
    }


def claim(*held: tuple[str, str], driver: str = DRIVER) -> dict[str, Any]:
    results = [{"driver": driver, "pool": p, "device": d, "request": "r"} for p, d in held]
    return {"status": {"allocation": {"devices": {"results": results}}}}


@pytest.mark.parametrize(
    ("slices", "claims", "problems"),
    [
        # Within capacity; a claim with no allocation yet holds nothing.
        (
            [slice_("n1", "tput", 2), slice_("n2", "tput", 1)],
            [claim(("n1/tput/0", "u0")), claim(("n1/tput/0", "u1")), {"status": {}}],
            [],
        ),
        # A device held by two claims (within the count, and beyond it).
        (
            [slice_("n1", "tput", 2)],
            [claim(("n1/tput/0", "u0")), claim(("n1/tput/0", "u0"))],
            ["device n1/tput/0/u0 held by 2 claims"],
        ),
        (
            [slice_("n1", "tput", 1)],
            [claim(("n1/tput/0", "u0")), claim(("n1/tput/0", "u0"))],
            ["device n1/tput/0/u0 held by 2 claims", "n1: 2 devices of tput claimed, 1 published"],
        ),
        # More claimed than published (a device not, or no longer, in the pool).
        (
            [slice_("n1", "tput", 1)],
            [claim(("n1/tput/0", "u0")), claim(("n1/tput/0", "u1"))],
            ["device n1/tput/0/u1 is claimed but not published"],
        ),
        # An older generation of the pool does not count; another driver's devices are not ours.
        (
            [slice_("n1", "tput", 3, generation=1), slice_("n1", "tput", 1, generation=2)],
            [claim(("n1/tput/0", "u2")), claim(("n1/tput/0", "u5"), driver="other.io")],
            ["device n1/tput/0/u2 is claimed but not published"],
        ),
        # An incomplete newest generation is not used: its devices count as unpublished.
        (
            [slice_("n1", "tput", 1, count=2)],
            [claim(("n1/tput/0", "u0"))],
            ["device n1/tput/0/u0 is claimed but not published"],
        ),
        # Two pools of one resource on a node add up; resources are counted apart.
        (
            [slice_("n1", "tput", 128), slice_("n1", "tput", 2, index=1), slice_("n1", "g", 1)],
            [claim(("n1/tput/1", "u129"), ("n1/g/0", "u0"))],
            [],
        ),
    ],
)
def test_dra_over_capacity_compares_claimed_and_published_devices(
    slices: list[dict[str, Any]], claims: list[dict[str, Any]], problems: list[str]
) -> None:
    assert dracheck.over_capacity(slices, claims, DRIVER, LABEL) == problems


def test_dra_published_maps_each_pool_to_its_node_resource_and_devices() -> None:
    pools = dracheck.published([slice_("n1", "tput", 2), slice_("n2", "g", 1)], LABEL)
    assert pools == {
        "n1/tput/0": ("n1", "tput", frozenset({"u0", "u1"})),
        "n2/g/0": ("n2", "g", frozenset({"u0"})),
    }


# --- the gang bench's dra approach ---------------------------------------------------------


def test_the_dra_approach_is_the_pure_runner_against_mode_dra(tmp_path: Path) -> None:
    footing = approaches.Footing(nodes=4, node_cpu="8", node_memory="32Gi")
    assert "dra" in approaches.APPROACHES and "dra" in approaches.POLICY
    assert approaches.cluster_spec("dra", tmp_path, footing).mode == "dra"
    assert approaches.cluster_spec("pure", tmp_path, footing).mode == "pure"
    loc = approaches.policy_loc()
    assert loc["dra"] == loc["pure"] and loc["dra"]


def test_the_gang_report_shows_the_controller_managers_cpu() -> None:
    runs = [{"cpu_seconds": {"kube-scheduler": 1.0, "kube-controller-manager": c}} for c in (2, 4)]
    figures = gang_report.aggregate(runs)
    assert figures["kcm_cpu_s"] == {"n": 2, "median": 3.0, "min": 2.0, "max": 4.0}
    assert "kcm_cpu_s" in gang_report.COST_TABLE
