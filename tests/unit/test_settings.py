"""Settings: a value that cannot work is refused at start, naming the setting."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from extender.settings import Settings

# Every duration, and the API budget: infinity would be a hang or no limit, NaN no order.
FINITE = [*sorted(n for n in Settings.model_fields if n.endswith("_seconds")), "kube_qps"]


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), "inf", "NaN"])
@pytest.mark.parametrize("name", FINITE)
def test_durations_and_the_api_budget_must_be_finite(name: str, value: object) -> None:
    with pytest.raises(ValidationError) as e:
        Settings(**{name: value})  # type: ignore[arg-type]
    assert [err["loc"] for err in e.value.errors()] == [(name,)]


def test_there_are_durations_to_check_and_the_defaults_are_valid() -> None:
    assert len(FINITE) > 10
    Settings()


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("", True),  # no switch written
        ("escher-system/escher-gang-gate", True),
        ("default/gate.v1", True),
        ("escher-gang-gate", False),  # no namespace
        ("escher-system/", False),
        ("/escher-gang-gate", False),
        ("Escher/gate", False),  # not a DNS label
        ("a/b/c", False),
        ("a b/c", False),
        ("a/" + "b" * 320, False),
        (5, False),
        (None, False),
    ],
)
def test_the_gang_gate_switch_is_a_config_map_namespace_and_name(value: object, ok: bool) -> None:
    if ok:
        assert Settings(gang_gate_switch=value).gang_gate_switch == value  # type: ignore[arg-type]
        return
    with pytest.raises(ValidationError) as e:
        Settings(gang_gate_switch=value)  # type: ignore[arg-type]
    assert [err["loc"] for err in e.value.errors()] == [("gang_gate_switch",)]


def test_the_gang_gate_cool_down_may_not_be_negative() -> None:
    with pytest.raises(ValidationError) as e:
        Settings(gang_gate_cooldown_seconds=-1)
    assert [err["loc"] for err in e.value.errors()] == [("gang_gate_cooldown_seconds",)]


@pytest.mark.parametrize(
    ("mode", "kube", "binds"),
    [("standalone", False, False), ("pure", True, False), ("extender", True, True)],
)
def test_one_mode_says_what_the_service_talks_to_and_does(
    mode: str, kube: bool, binds: bool
) -> None:
    s = Settings(mode=mode)  # type: ignore[arg-type]
    assert (s.kube, s.binds) == (kube, binds)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"mode": "both"}, "Input should be 'standalone', 'pure', 'extender' or 'dra'"),
        ({"mode": "standalone", "leader_elect": True}, "leader_elect needs the Kubernetes API"),
        ({"mode": "standalone", "kubernetes_auth": True}, "kubernetes_auth needs the Kubernetes"),
    ],
)
def test_a_mode_that_cannot_work_is_refused_naming_it(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        Settings(**overrides)  # type: ignore[arg-type]
