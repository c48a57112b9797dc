"""escher_harness.bench.promhist: histograms and counters out of Prometheus text, their
difference between scrapes, and quantiles estimated as histogram_quantile does."""

from __future__ import annotations

import pytest

from escher_harness.bench import promhist

BEFORE = """\
# TYPE req_seconds histogram
req_seconds_bucket{verb="filter",le="0.001"} 10
req_seconds_bucket{verb="filter",le="0.01"} 20
req_seconds_bucket{verb="filter",le="+Inf"} 20
req_seconds_sum{verb="filter"} 0.05
req_seconds_count{verb="filter"} 20
# TYPE writes_total counter
writes_total{resource="pods"} 3
writes_total{resource="nodes"} 4
"""
AFTER = """\
# TYPE req_seconds histogram
req_seconds_bucket{verb="filter",le="0.001"} 60
req_seconds_bucket{verb="filter",le="0.01"} 120
req_seconds_bucket{verb="filter",le="+Inf"} 121
req_seconds_sum{verb="filter"} 0.55
req_seconds_count{verb="filter"} 121
req_seconds_bucket{verb="bind",le="0.001"} 0
req_seconds_bucket{verb="bind",le="0.01"} 4
req_seconds_bucket{verb="bind",le="+Inf"} 4
req_seconds_sum{verb="bind"} 0.02
req_seconds_count{verb="bind"} 4
# TYPE writes_total counter
writes_total{resource="pods"} 10
writes_total{resource="nodes"} 4
"""


def by_verb(labels: promhist.Labels) -> str:
    return labels["verb"]


def test_the_difference_between_scrapes_is_what_the_run_did() -> None:
    spent = promhist.minus(
        promhist.histograms(AFTER, "req_seconds", by_verb),
        promhist.histograms(BEFORE, "req_seconds", by_verb),
    )
    assert spent["filter"].count == 101
    assert spent["filter"].sum == pytest.approx(0.5)
    assert dict(spent["filter"].buckets) == {0.001: 50, 0.01: 100, float("inf"): 101}
    assert spent["bind"].count == 4  # new since the first scrape: all of it


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.25, 0.0005),  # inside the first bucket: linear from 0
        (0.5, 0.001),  # the first bucket's bound
        (0.75, 0.0055),  # halfway into the second bucket
        (1.0, 0.01),  # the last finite bound
    ],
    ids=["first-bucket", "bound", "second-bucket", "inf-bucket"],
)
def test_quantiles_interpolate_within_a_bucket(q: float, expected: float) -> None:
    h = promhist.Histogram(((0.001, 50), (0.01, 100), (float("inf"), 100)), 100, 0.5)
    assert h.quantile(q) == pytest.approx(expected, rel=0.02)


def test_an_empty_histogram_has_no_quantiles() -> None:
    assert promhist.EMPTY.quantile(0.5) is None
    assert promhist.EMPTY.summary_ms() == {
        "count": 0, "mean": None, "p50": None, "p90": None, "p99": None,
    }  # fmt: skip


def test_series_with_a_none_key_are_skipped_and_same_keys_added() -> None:
    assert promhist.counters(AFTER, "writes", lambda labels: "all") == {"all": 14}
    assert promhist.counters(
        AFTER, "writes", lambda labels: labels["resource"] if labels["resource"] == "pods" else None
    ) == {"pods": 10}
    assert promhist.histograms(AFTER, "req_seconds", lambda labels: "all")["all"].count == 125


def test_a_quantile_beyond_the_last_bound_is_that_bound() -> None:
    h = promhist.Histogram(((0.001, 50), (0.01, 100), (float("inf"), 120)), 120, 0.5)
    assert h.quantile(0.99) == 0.01


def test_gauges_are_summed_per_key() -> None:
    text = '# TYPE held gauge\nheld{kind="bound"} 3\nheld{kind="assumed"} 1\nheld{kind="bound"} 2\n'
    assert promhist.gauges(text, "held", lambda labels: labels["kind"]) == {
        "bound": 5, "assumed": 1,
    }  # fmt: skip
