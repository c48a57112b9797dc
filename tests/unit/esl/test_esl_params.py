"""ESL parameters: what validation refuses (InvalidParameters naming the field), the registry's
shape, and how two pods' request vectors merge (the AND of compositions)."""

from __future__ import annotations

from typing import Any

import pytest

from extender.esl.base import KEY_MAX, MAX_KEYS, NAME_MAX, ESLParams, PodRequest, parse_params
from extender.esl.colocation import ColocationParams
from extender.esl.compose import ComposeParams
from extender.esl.errors import InvalidParameters, Unsatisfiable
from extender.esl.fairshare import FairShareParams
from extender.esl.gang import GangParams
from extender.esl.loadbalance import LoadBalanceParams
from extender.esl.locality import LocalityParams
from extender.esl.queues import QueuesParams
from extender.esl.registry import REGISTRY
from extender.esl.sequencing import SequencingParams
from extender.esl.soft import SoftParams

D = "escher.io"
TWO_GROUPS = {"x": {"users": {"u": 1}}, "y": {"users": {"u": 1}}}
MANY_USERS = {g: {"users": {f"{g}{i}": 1 for i in range(600)}} for g in ("x", "y")}

BAD_PARAMS: list[tuple[str, type[ESLParams], dict[str, Any], str | None, str]] = [
    ("no-groups", ColocationParams, {"name": "g", "groups": {}}, "groups", "at least 1"),
    (
        "empty-group",
        ColocationParams,
        {"name": "g", "groups": {"a": 0}},
        "groups.a",
        "greater than or equal to 1",
    ),
    (
        "cpu-not-a-quantity",
        ColocationParams,
        {"name": "g", "groups": {"a": 2}, "cpu": "lots"},
        "cpu",
        "lots",
    ),
    ("cpu-zero", ColocationParams, {"name": "g", "groups": {"a": 2}, "cpu": "0"}, "cpu", "> 0"),
    (
        "members-as-text",
        ColocationParams,
        {"name": "g", "groups": {"a": "2"}},
        "groups.a",
        "valid integer",
    ),
    ("no-name", ColocationParams, {"groups": {"a": 2}}, "name", "Field required"),
    ("bad-name", ColocationParams, {"name": "G!", "groups": {"a": 2}}, "name", "must be 1-30"),
    (
        "bad-key",
        ColocationParams,
        {"name": "g", "groups": {"A_": 2}},
        "groups.A_.[key]",
        "must be 1-20",
    ),
    (
        "unknown-field",
        ColocationParams,
        {"name": "g", "groups": {"a": 2}, "gpus": 1},
        "gpus",
        "not permitted",
    ),
    ("static-without-tasks", LoadBalanceParams, {"name": "l"}, None, "tasks is required"),
    ("unknown-mode", LoadBalanceParams, {"name": "l", "mode": "round"}, "mode", "'static' or"),
    ("no-place", LocalityParams, {"name": "d"}, None, "exactly one of node, node_selector"),
    (
        "two-places",
        LocalityParams,
        {"name": "d", "node": "n", "node_selector": {"a": "b"}},
        None,
        "exactly one of node, node_selector",
    ),
    ("one-stage", SequencingParams, {"name": "s", "stages": ["a"]}, "stages", "at least 2"),
    ("same-stage", SequencingParams, {"name": "s", "stages": ["a", "a"]}, "stages", "unique"),
    ("no-slots", QueuesParams, {"name": "q", "weights": {"a": 1}}, "slots", "Field required"),
    (
        "user-in-two-groups",
        FairShareParams,
        {"name": "f", "slots": 2, "groups": TWO_GROUPS},
        None,
        "user u is in both groups x and y",
    ),
    (
        "group-without-users",
        FairShareParams,
        {"name": "f", "slots": 2, "groups": {"x": {"users": {}}}},
        "groups.x.users",
        "at least 1",
    ),
    ("no-alternatives", SoftParams, {"name": "s", "alternatives": []}, "alternatives", "least 1"),
    (
        "zero-timeout",
        SoftParams,
        {"name": "s", "alternatives": [{}], "timeout_seconds": 0},
        "timeout_seconds",
        "greater than 0",
    ),
    (
        "unknown-target-field",
        SoftParams,
        {"name": "s", "alternatives": [{"zone": "a"}]},
        "alternatives.0.zone",
        "not permitted",
    ),
    ("xor", ComposeParams, {"name": "c", "op": "xor", "pods": 1}, "op", "'and' or 'or'"),
    (
        "part-without-kind",
        ComposeParams,
        {"name": "c", "op": "and", "pods": 1, "parts": [{"params": {}}]},
        "parts.0.kind",
        "Field required",
    ),
    ("no-members", GangParams, {"name": "g", "members": 0}, "members", "greater than or equal"),
    ("gang-memory", GangParams, {"name": "g", "members": 2, "memory": "1Qi"}, "memory", "1Qi"),
    (
        "gang-timeout-over-a-day",
        GangParams,
        {"name": "g", "members": 2, "timeout_seconds": 86_401},
        "timeout_seconds",
        "less than or equal to 86400",
    ),
    (
        "gang-no-attempt-time",
        GangParams,
        {"name": "g", "members": 2, "attempt_seconds": 0},
        "attempt_seconds",
        "greater than 0",
    ),
    ("not-a-mapping", GangParams, [1], None, "valid dictionary"),
    (
        "too-many-groups",
        ColocationParams,
        {"name": "g", "groups": {f"g{i}": 1 for i in range(MAX_KEYS + 1)}},
        "groups",
        "at most 1000 items",
    ),
    (
        "too-many-users",
        FairShareParams,
        {"name": "f", "slots": 2, "groups": MANY_USERS},
        None,
        "at most 1000 users in all, not 1200",
    ),
    (
        "too-many-alternatives",
        SoftParams,
        {"name": "s", "alternatives": [{}] * 65},
        "alternatives",
        "at most 64 items",
    ),
    (
        "too-many-slots",
        QueuesParams,
        {"name": "q", "weights": {"a": 1}, "slots": 10**20},
        "slots",
        "less than or equal to 100000",
    ),
    ("long-node-name", LocalityParams, {"name": "d", "node": "n" * 254}, "node", "at most 253"),
    (
        "too-many-labels",
        LocalityParams,
        {"name": "d", "node_selector": {f"k{i}": "v" for i in range(65)}},
        "node_selector",
        "at most 64 items",
    ),
    (
        "node-and-selector",
        SoftParams,
        {"name": "s", "alternatives": [{}, {"node": "n", "node_selector": {"a": "b"}}]},
        "alternatives.1",
        "give at most one of node, node_selector",
    ),
    ("gang-too-large", GangParams, {"name": "g", "members": 10_001}, "members", "10000"),
]


@pytest.mark.parametrize(
    ("cls", "data", "field", "fragment"),
    [pytest.param(*row[1:], id=row[0]) for row in BAD_PARAMS],
)
def test_impossible_parameters_raise_naming_the_field(
    cls: type[ESLParams], data: Any, field: str | None, fragment: str
) -> None:
    with pytest.raises(InvalidParameters) as e:
        parse_params(cls, data)
    assert e.value.field == field
    assert fragment in str(e.value)
    if field:  # the message starts with the field it names
        assert str(e.value).startswith(f"{field}: ")


@pytest.mark.parametrize(("kind", "cls"), list(REGISTRY.items()))
def test_every_registered_esl_is_found_by_its_name_and_takes_params(
    kind: str, cls: type[Any]
) -> None:
    assert kind == cls.NAME
    assert issubclass(cls.Params, ESLParams)
    # The longest resource name it can make stays within Kubernetes' 63 characters.
    assert len(f"{cls.PREFIX}-{'n' * NAME_MAX}-{'k' * KEY_MAX}") <= 63


def test_the_registry_holds_every_esl_of_the_package() -> None:
    assert set(REGISTRY) == {
        "antiaffinity",
        "binpack",
        "colocation",
        "compose",
        "fairshare",
        "gang",
        "loadbalance",
        "locality",
        "queues",
        "sequencing",
        "soft",
    }


A = PodRequest(limits={"cpu": "500m", f"{D}/x": "1"}, labels={"app": "a"})


@pytest.mark.parametrize(
    ("other", "limits", "labels"),
    [
        pytest.param(
            PodRequest(limits={"cpu": "1", f"{D}/y": "1"}, labels={"tier": "web"}),
            {"cpu": "1", f"{D}/x": "1", f"{D}/y": "1"},
            {"app": "a", "tier": "web"},
            id="larger-cpu-wins",
        ),
        pytest.param(
            PodRequest(limits={"cpu": "100m"}, labels={"app": "a"}),
            {"cpu": "500m", f"{D}/x": "1"},
            {"app": "a"},
            id="smaller-cpu-loses-same-label-agrees",
        ),
        pytest.param(
            PodRequest(limits={f"{D}/x": "2"}),
            {"cpu": "500m", f"{D}/x": "2"},
            {"app": "a"},
            id="larger-unit-count-wins",
        ),
    ],
)
def test_merge_takes_the_larger_amount(
    other: PodRequest, limits: dict[str, str], labels: dict[str, str]
) -> None:
    merged = A.merge(other)
    assert (merged.limits, merged.labels) == (limits, labels)
    assert other.merge(A).limits == limits  # AND is symmetric


@pytest.mark.parametrize(
    ("other", "message"),
    [
        pytest.param(
            PodRequest(limits={}, labels={"app": "b"}),
            "label app is asked to be both 'a' and 'b'",
            id="label",
        ),
        pytest.param(
            PodRequest(limits={}, annotations={f"{D}/pack": "p"}),
            f"annotation {D}/pack is asked to be both 'q' and 'p'",
            id="annotation",
        ),
    ],
)
def test_merge_refuses_contradictions(other: PodRequest, message: str) -> None:
    mine = A.model_copy(update={"annotations": {f"{D}/pack": "q"}})
    with pytest.raises(Unsatisfiable) as e:
        mine.merge(other)
    assert str(e.value) == message
