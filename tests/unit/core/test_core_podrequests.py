"""Pod requests exactly as kube-scheduler v1.37.2 computes them (component-helpers'
PodRequests, as NodeResourcesFit calls it). Cases with a `go:` id are ported from
helpers_test.go's TestPodResourceRequests and TestPodRequestsAndLimitsWithoutOverhead."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from extender.core.objects import PodSpec
from extender.core.podrequests import pod_requests
from extender.core.quantity import InvalidQuantity


def c(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
      always: bool = False) -> dict[str, Any]:  # fmt: skip
    container: dict[str, Any] = {"resources": {"requests": requests or {}, "limits": limits or {}}}
    if always:
        container["restartPolicy"] = "Always"
    return container


def spec(**fields: Any) -> PodSpec:
    return msgspec.json.decode(msgspec.json.encode(fields), type=PodSpec)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param(
            {"containers": [c({"cpu": "1"}), c({"cpu": "2"})]},
            {"cpu": 3000},
            id="go:two-containers-summed",
        ),
        pytest.param(
            {"initContainers": [c({"cpu": "2"})], "containers": [c({"cpu": "1"})]},
            {"cpu": 2000},
            id="go:nil-options-larger-init-container",
        ),
        pytest.param(
            {"initContainers": [c({"cpu": "1"})], "containers": [c({"cpu": "2"}), c({"cpu": "1"})]},
            {"cpu": 3000},
            id="go:nil-options-larger-containers",
        ),
        pytest.param(
            {"containers": [c({"cpu": "1"})], "overhead": {"cpu": "500m"}},
            {"cpu": 1500},
            id="go:pod-overhead-included",
        ),
        pytest.param(
            {"initContainers": [c({"cpu": "1"}, always=True)], "containers": [c({"cpu": "1"})]},
            {"cpu": 2000},
            id="go:restartable-init-container",
        ),
        pytest.param(
            {
                "initContainers": [
                    c({"cpu": "5"}),
                    c({"cpu": "1"}, always=True),
                    c({"cpu": "2"}, always=True),
                    c({"cpu": "3"}, always=True),
                ],
                "containers": [c({"cpu": "1"})],
            },
            {"cpu": 7000},
            id="go:multiple-restartable-init-containers",
        ),
        pytest.param(
            {
                "initContainers": [
                    c({"cpu": "5"}),
                    c({"cpu": "1"}, always=True),
                    c({"cpu": "2"}, always=True),
                    c({"cpu": "5"}),
                    c({"cpu": "3"}, always=True),
                ],
                "containers": [c({"cpu": "1"})],
            },
            {"cpu": 8000},
            id="go:multiple-restartable-and-regular-init-containers",
        ),
        pytest.param(
            {
                "initContainers": [c({"cpu": "10"}, always=True), c({"cpu": "200"})],
                "containers": [c({"cpu": "100"})],
            },
            {"cpu": 210_000},
            id="go:restartable-init-init-and-regular",
        ),
        pytest.param(
            {
                "initContainers": [c({"escher.io/x": "1"}, always=True)],
                "containers": [c({"escher.io/x": "1"})],
            },
            {"escher.io/x": 2},
            id="a-sidecar-and-a-container-asking-1-each-need-2",
        ),
        pytest.param(
            {"containers": [c(limits={"escher.io/x": "2", "cpu": "1"})]},
            {"escher.io/x": 2, "cpu": 1000},
            id="requests-default-to-limits",
        ),
        pytest.param(
            {"containers": [c({"cpu": "500m"}, {"cpu": "2"})]},
            {"cpu": 500},
            id="requests-win-over-limits",
        ),
        pytest.param(
            {
                "containers": [c({"cpu": "1", "memory": "1Gi", "escher.io/x": "1"})],
                "resources": {"requests": {"cpu": "4"}},
            },
            {"cpu": 4000, "memory": 2**30, "escher.io/x": 1},
            id="go:pod-level-cpu-replaces-the-containers",
        ),
        pytest.param(
            {
                "containers": [c({"cpu": "1", "escher.io/x": "1"})],
                "resources": {"requests": {"escher.io/x": "9"}},
            },
            {"cpu": 1000, "escher.io/x": 1},
            id="go:pod-level-unsupported-resources-are-ignored",
        ),
        pytest.param(
            {"containers": [c({"cpu": "0.5m"}), c({"cpu": "0.5m"})]},
            {"cpu": 1},
            id="summed-exactly-then-rounded",
        ),
        pytest.param(
            {"containers": [c({"cpu": "1.1m", "memory": "1.5", "ephemeral-storage": "2001m"})]},
            {"cpu": 2, "memory": 2, "ephemeral-storage": 3},
            id="fractions-round-up",
        ),
        pytest.param(
            {"containers": [c({"cpu": "0.0001"})]},
            {"cpu": 1},
            id="a-fraction-of-a-millicore-is-one",
        ),
        pytest.param({}, {}, id="nothing-requested"),
    ],
)
def test_pod_requests(fields: dict[str, Any], expected: dict[str, int]) -> None:
    assert pod_requests(spec(**fields)) == {**expected, "pods": 1}


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        pytest.param(
            {"containers": [c({"cpu": "1"}), c(limits={"escher.io/x": "-5"})]},
            "spec.containers[1].resources.limits[escher.io/x]",
            id="negative",
        ),
        pytest.param(
            {"initContainers": [c({"escher.io/x": "0.5"})]},
            "spec.initContainers[0].resources.requests[escher.io/x]",
            id="fraction-of-an-extended-resource",
        ),
        pytest.param({"overhead": {"memory": "NaN"}}, "spec.overhead[memory]", id="overhead-nan"),
        pytest.param(
            {"resources": {"requests": {"cpu": "1e1000000"}}},
            "spec.resources.requests[cpu]",
            id="pod-level-huge",
        ),
    ],
)
def test_a_malformed_quantity_is_refused_naming_its_field(
    fields: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidQuantity) as e:
        pod_requests(spec(**fields))
    assert e.value.field == field
