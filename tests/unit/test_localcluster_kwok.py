"""kwok's part in the local control plane without running it: the stages file it is given,
and the annotations and formats the stages read (escher_harness.localcluster.kwok)."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
import yaml

from escher_harness.localcluster import kwok

# Go's time.ParseDuration grammar: one or more decimal numbers, each with a unit.
GO_DURATION = re.compile(
    r"^(\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)((\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))*$"
)


def stages() -> dict[str, dict[str, Any]]:
    documents = list(yaml.safe_load_all(kwok.STAGES.read_text()))
    names = [d["metadata"]["name"] for d in documents]
    assert len(set(names)) == len(names), names
    return {d["metadata"]["name"]: d for d in documents}


def expressions(stage: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["key"]: e for e in stage["spec"]["selector"]["matchExpressions"]}


def annotation_query(name: str) -> str:
    return f'.metadata.annotations["{name}"]'


def test_stages_are_kwok_stages_for_nodes_and_pods() -> None:
    found = stages()
    assert sorted(found) == [
        "node-heartbeat",
        "node-initialize",
        "pod-complete-after-run-time",
        "pod-delete",
        "pod-ready",
    ]
    for stage in found.values():
        assert (stage["apiVersion"], stage["kind"]) == ("kwok.x-k8s.io/v1alpha1", "Stage")
        assert stage["spec"]["resourceRef"]["apiGroup"] == "v1"
        kind = "Node" if stage["metadata"]["name"].startswith("node-") else "Pod"
        assert stage["spec"]["resourceRef"]["kind"] == kind


def test_no_stage_writes_capacity_or_allocatable() -> None:
    # kwok renders from its cached node: re-emitting these could undo a newer write-back.
    for stage in stages().values():
        template = stage["spec"]["next"].get("statusTemplate", "")
        assert "capacity" not in template and "allocatable" not in template


def test_node_initialize_sets_the_phase_the_start_up_waits_for() -> None:
    stage = stages()["node-initialize"]
    assert expressions(stage)[".status.phase"]["values"] == [kwok.TAKEN_OVER_PHASE]
    assert f"phase: {kwok.TAKEN_OVER_PHASE}" in stage["spec"]["next"]["statusTemplate"]


def test_heartbeat_interval_comes_from_the_annotation_or_20_to_45_seconds() -> None:
    delay = stages()["node-heartbeat"]["spec"]["delay"]
    query = annotation_query(kwok.HEARTBEAT_ANNOTATION)
    # Both from the annotation: a jitter equal to the duration wins, so the interval is exact.
    assert delay["durationFrom"]["jq"]["expression"] == query
    assert delay["jitterDurationFrom"]["jq"]["expression"] == query
    # Without it, kwok draws uniformly from [duration, jitter) (the jitter is the larger).
    assert (delay["durationMilliseconds"], delay["jitterDurationMilliseconds"]) == (20000, 45000)


def test_run_time_stage_completes_annotated_running_pods_after_exactly_the_run_time() -> None:
    stage = stages()["pod-complete-after-run-time"]
    query = annotation_query(kwok.RUN_TIME_ANNOTATION)
    selector = expressions(stage)
    assert selector[query]["operator"] == "Exists"
    assert selector[".status.phase"] == {
        "key": ".status.phase",
        "operator": "In",
        "values": ["Running"],
    }
    assert selector[".metadata.deletionTimestamp"]["operator"] == "DoesNotExist"
    # No jitter and no fixed duration: the delay is the annotation's, nothing else.
    assert stage["spec"]["delay"] == {"durationFrom": {"jq": {"expression": query}}}
    assert "phase: Succeeded" in stage["spec"]["next"]["statusTemplate"]


def test_terminating_pods_are_deleted() -> None:
    stage = stages()["pod-delete"]
    assert expressions(stage)[".metadata.deletionTimestamp"]["operator"] == "Exists"
    assert stage["spec"]["next"] == {"delete": True}


def test_pods_run_once_bound_and_no_other_stage_completes_them() -> None:
    found = stages()
    ready = found["pod-ready"]
    assert expressions(ready)[".status.phase"]["values"] == ["Pending"]
    assert "phase: Running" in ready["spec"]["next"]["statusTemplate"]
    completing = [
        name
        for name, stage in found.items()
        if "Succeeded" in stage["spec"]["next"].get("statusTemplate", "")
        or "Failed" in stage["spec"]["next"].get("statusTemplate", "")
    ]
    assert completing == ["pod-complete-after-run-time"]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (30, "30s"),
        (1.5, "1.5s"),
        (0, "0s"),
        (100, "100s"),
        (0.000001, "0.000001s"),
        (0.25, "0.25s"),
        (3600.5, "3600.5s"),
    ],
    ids=["whole", "fraction", "zero", "trailing-zeros", "microsecond", "quarter", "hour"],
)
def test_run_time_is_a_go_duration(seconds: float, text: str) -> None:
    assert kwok.format_run_time(seconds) == text
    assert GO_DURATION.match(text)


@pytest.mark.parametrize(
    "seconds", [-1.0, math.inf, math.nan, 1e10], ids=["negative", "inf", "nan", "beyond-go"]
)
def test_run_time_out_of_range_is_refused(seconds: float) -> None:
    with pytest.raises(ValueError, match="run time must be"):
        kwok.format_run_time(seconds)
