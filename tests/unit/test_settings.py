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
