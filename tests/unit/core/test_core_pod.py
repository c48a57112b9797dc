"""PodInfo: what decisions read of a pod, bounded to the extender's own keys."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
import pytest

from extender.core.errors import InvalidValue
from extender.core.objects import Pod
from extender.core.pod import COSCHEDULING_LABEL, MAX_VALUE, Keys, pod_info

KEYS = Keys.for_domain("escher.io")

T = TypeVar("T")


def _decode(obj: Any, kind: type[T]) -> T:
    """As the wire does it: from JSON (msgspec.Raw fields come only from JSON)."""
    return msgspec.json.decode(msgspec.json.encode(obj), type=kind)


def pod(**meta: Any) -> Pod:
    return _decode(
        {
            "metadata": {"name": "p", "uid": "u", **meta},
            "spec": {
                "priority": 7,
                "containers": [{"resources": {"limits": {"escher.io/x": "2", "cpu": "500m"}}}],
            },
        },
        Pod,
    )


def test_requests_ephemeral_and_priority() -> None:
    info = pod_info(pod(), KEYS, "escher.io/")
    assert info.requests == {"escher.io/x": 2, "cpu": 500, "pods": 1}
    assert info.ephemeral == {"escher.io/x": 2}
    assert (info.priority, info.namespace, info.node, info.done) == (7, "default", "", False)
    assert info.constraints is None


@pytest.mark.parametrize(
    ("labels", "annotations", "gang", "marks"),
    [
        ({"app": "x"}, {"note": "y"}, "", {}),
        (
            {"escher.io/gang": "g"},
            {"escher.io/gang-min": "3"},
            "g",
            {"escher.io/gang": "g", "escher.io/gang-min": "3"},
        ),
        ({COSCHEDULING_LABEL: "pg"}, {}, "pg", {COSCHEDULING_LABEL: "pg"}),
        ({}, {"escher.io/prefer": "a,b", "escher.io/other": "z"}, "", {"escher.io/prefer": "a,b"}),
    ],
)
def test_only_the_extenders_keys_are_kept(
    labels: dict[str, str], annotations: dict[str, str], gang: str, marks: dict[str, str]
) -> None:
    info = pod_info(pod(labels=labels, annotations=annotations), KEYS, "escher.io/")
    assert (info.gang, dict(info.marks)) == (gang, marks)
    assert (info.constraints is not None) is bool(gang)


def test_a_value_too_long_is_refused_naming_it() -> None:
    with pytest.raises(InvalidValue) as e:
        pod_info(pod(annotations={"escher.io/prefer": "x" * (MAX_VALUE + 1)}), KEYS, "escher.io/")
    assert e.value.field == "metadata.annotations[escher.io/prefer]"


@pytest.mark.parametrize(
    ("marker", "name"),
    [
        (KEYS.gang_marker, "scheduling.escher.io/gang"),
        (KEYS.score_marker, "scheduling.escher.io/score"),
    ],
)
def test_a_marker_resource_occupies_nothing_and_is_not_ephemeral(marker: str, name: str) -> None:
    """deploy/'s admission policies add a marker to pods that need one of the extender's
    entries; the nodes advertise it (write-back) and kube-scheduler ignores it, so the ledger
    must too."""
    raw = _decode(
        {
            "metadata": {"name": "p", "uid": "u"},
            "spec": {"containers": [{"resources": {"limits": {marker: "1", "cpu": "1"}}}]},
        },
        Pod,
    )
    info = pod_info(raw, KEYS, "escher.io/")
    assert marker == name
    assert info.requests == {"cpu": 1000, "pods": 1}
    assert info.ephemeral == {} and not (info.gang or info.marks)
