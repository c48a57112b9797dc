"""Histograms, counters and gauges read out of a Prometheus text answer (/metrics), and their
difference between two scrapes. Pure, no I/O.

The benchmarks scrape kube-scheduler's, kube-apiserver's and the extender's /metrics before and
after a run; the difference is what that run did. Percentiles are estimated from the buckets
the way Prometheus' histogram_quantile does (linear within a bucket), so they are only as fine
as the buckets. Parsing is prometheus_client's own text parser. Called by
escher_harness.bench.throughput and escher_harness.bench.schedperf_run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

Labels = Mapping[str, str]


@dataclass(frozen=True)
class Histogram:
    """Cumulative counts per upper bound (s), ascending and ending at +Inf; count; sum (s)."""

    buckets: tuple[tuple[float, float], ...]
    count: float
    sum: float

    def minus(self, before: Histogram) -> Histogram:
        earlier = dict(before.buckets)
        return Histogram(
            buckets=tuple((le, n - earlier.get(le, 0.0)) for le, n in self.buckets),
            count=self.count - before.count,
            sum=self.sum - before.sum,
        )

    def quantile(self, q: float) -> float | None:
        """The q-quantile (0..1) in seconds, interpolated within its bucket; None if empty.
        A quantile in the +Inf bucket is reported as the highest finite bound."""
        if self.count <= 0:
            return None
        rank = q * self.count
        lower, below = 0.0, 0.0
        for le, cumulative in self.buckets:
            if cumulative >= rank:
                if math.isinf(le):
                    return lower
                inside = cumulative - below
                return lower + (le - lower) * ((rank - below) / inside if inside else 1.0)
            lower, below = le, cumulative
        return lower

    def summary_ms(self) -> dict[str, Any]:
        """count, mean and estimated p50 / p90 / p99 in ms, rounded for reports."""

        def ms(v: float | None) -> float | None:
            return None if v is None else round(v * 1000, 3)

        return {
            "count": int(self.count),
            "mean": ms(self.sum / self.count) if self.count else None,
            "p50": ms(self.quantile(0.5)),
            "p90": ms(self.quantile(0.9)),
            "p99": ms(self.quantile(0.99)),
        }


EMPTY = Histogram((), 0.0, 0.0)


def histograms(text: str, name: str, key: Callable[[Labels], str | None]) -> dict[str, Histogram]:
    """The histogram `name` (without _bucket/_count/_sum), one per `key(labels)`; series whose
    key is None are skipped, series with the same key are added up."""
    buckets: dict[str, dict[float, float]] = {}
    counts: dict[str, float] = {}
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for s in family.samples:
            labels = {k: v for k, v in s.labels.items() if k != "le"}
            k = key(labels)
            if k is None:
                continue
            if s.name.endswith("_bucket"):
                le = float(s.labels["le"])
                per = buckets.setdefault(k, {})
                per[le] = per.get(le, 0.0) + s.value
            elif s.name.endswith("_count"):
                counts[k] = counts.get(k, 0.0) + s.value
            elif s.name.endswith("_sum"):
                sums[k] = sums.get(k, 0.0) + s.value
    return {
        k: Histogram(tuple(sorted(b.items())), counts.get(k, 0.0), sums.get(k, 0.0))
        for k, b in buckets.items()
    }


def counters(text: str, name: str, key: Callable[[Labels], str | None]) -> dict[str, float]:
    """The counter `name` (without _total), summed per `key(labels)`; None keys skipped."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for s in family.samples:
            if not s.name.endswith("_total"):
                continue
            k = key(s.labels)
            if k is not None:
                out[k] = out.get(k, 0.0) + s.value
    return out


def gauges(text: str, name: str, key: Callable[[Labels], str | None]) -> dict[str, float]:
    """The gauge `name`, summed per `key(labels)`; None keys skipped."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for s in family.samples:
            k = key(s.labels)
            if k is not None:
                out[k] = out.get(k, 0.0) + s.value
    return out


def minus(after: Mapping[str, Histogram], before: Mapping[str, Histogram]) -> dict[str, Histogram]:
    """Per key, what was observed between two scrapes."""
    return {k: h.minus(before.get(k, EMPTY)) for k, h in after.items()}
