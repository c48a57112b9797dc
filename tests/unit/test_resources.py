"""Quantities, pod requests and resource names as the ledger counts them."""

from __future__ import annotations

from typing import Any

import pytest

from extender import resources
from extender.resources import InvalidResource


@pytest.mark.parametrize(
    ("resource", "quantity", "expected"),
    [
        ("cpu", "100m", 100),
        ("cpu", "2", 2000),
        ("cpu", "0.5", 500),
        ("cpu", 1, 1000),
        ("memory", "1Gi", 1 << 30),
        ("memory", "1k", 1000),
        ("memory", "1.5", 2),  # fractional bytes round up
        ("escher.io/g", "3", 3),
    ],
)
def test_amount(resource: str, quantity: Any, expected: int) -> None:
    assert resources.amount(resource, quantity) == expected


@pytest.mark.parametrize("quantity", ["abc", "1.5", "-1", "1m", None, "0.5"])
def test_whole_amount_rejects(quantity: Any) -> None:
    with pytest.raises(InvalidResource, match=r"escher\.io/x"):
        resources.whole_amount("escher.io/x", quantity)


def test_whole_amount_accepts() -> None:
    assert resources.whole_amount("escher.io/x", "4") == 4
    assert resources.whole_amount("escher.io/x", 0) == 0


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("gpu", True),
        ("gang-a.0_b", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("", False),
        ("-a", False),
        ("a/b", False),
        ("a!", False),
    ],
)
def test_short_names(name: str, ok: bool) -> None:
    if ok:
        assert resources.full_name("escher.io", name) == f"escher.io/{name}"
    else:
        with pytest.raises(InvalidResource, match="resource name"):
            resources.full_name("escher.io", name)


def c(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None) -> Any:
    res: dict[str, Any] = {}
    if limits:
        res["limits"] = limits
    if requests:
        res["requests"] = requests
    return {"name": "c", "resources": res}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"containers": [c()]}, {"pods": 1}),
        (
            {"containers": [c({"escher.io/g": "1"}), c({"escher.io/g": "2", "cpu": "1"})]},
            {"escher.io/g": 3, "cpu": 1000, "pods": 1},
        ),
        # requests win over limits for cpu/memory, as the API server defaults them
        ({"containers": [c({"cpu": "2"}, {"cpu": "500m"})]}, {"cpu": 500, "pods": 1}),
        # init containers: max with the sum of the app containers
        (
            {
                "containers": [c(requests={"cpu": "1"})],
                "initContainers": [c(requests={"cpu": "3"}), c(requests={"cpu": "2"})],
            },
            {"cpu": 3000, "pods": 1},
        ),
        (
            {"containers": [c(requests={"cpu": "1"})], "overhead": {"cpu": "250m"}},
            {"cpu": 1250, "pods": 1},
        ),
    ],
)
def test_pod_amounts(spec: dict[str, Any], expected: dict[str, int]) -> None:
    assert resources.pod_amounts({"spec": spec}) == expected


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        ({}, "Pod.spec is missing"),
        ({"spec": {"containers": "x"}}, "Pod.spec.containers must be a list"),
        ({"spec": {"containers": [c({"cpu": "lots"})]}}, "cpu: invalid quantity 'lots'"),
    ],
)
def test_pod_amounts_malformed(pod: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidResource, match=message):
        resources.pod_amounts(pod)


def test_split_and_format() -> None:
    eph, other = resources.split({"escher.io/a": 1, "cpu": 5, "example.com/b": 2}, "escher.io")
    assert eph == {"escher.io/a": 1}
    assert other == {"cpu": 5, "example.com/b": 2}
    assert resources.format_amount("cpu", 1500) == "1500m"
    assert resources.format_amount("cpu", 2000) == "2"
    assert resources.format_amount("escher.io/a", 3) == "3"
