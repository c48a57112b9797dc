"""The extender's own view of a run, from two scrapes of its /metrics.

`escher_extender_request_seconds` (server-side latency per verb: parse, decide, serialise) and
`escher_extender_decisions_total` (per verb and outcome) are read before and after a run; the
difference is what that run cost the extender. Percentiles are estimated from the histogram's
buckets the way Prometheus' histogram_quantile does (linear within the bucket), so they are
only as fine as the buckets (extender.metrics: 0.1 ms, 0.25 ms, 0.5 ms, 1 ms, 2 ms, 5 ms, ...).
Parsing is prometheus_client's own text parser. Called by escher_harness.bench.schedperf_run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client.parser import text_string_to_metric_families

LATENCY: Final = "escher_extender_request_seconds"
DECISIONS: Final = "escher_extender_decisions"  # the parser drops the counter's _total


@dataclass(frozen=True)
class Histogram:
    """One verb's latency histogram: cumulative counts per upper bound (s), count, sum (s)."""

    buckets: tuple[tuple[float, float], ...]  # (le, cumulative count), ascending, ends at +Inf
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


@dataclass(frozen=True)
class Scrape:
    """The parts of one /metrics answer the benchmarks read."""

    latency: Mapping[str, Histogram]  # verb -> histogram
    decisions: Mapping[tuple[str, str], float]  # (verb, outcome) -> count

    def minus(self, before: Scrape) -> Scrape:
        empty = Histogram((), 0.0, 0.0)
        return Scrape(
            latency={v: h.minus(before.latency.get(v, empty)) for v, h in self.latency.items()},
            decisions={k: n - before.decisions.get(k, 0.0) for k, n in self.decisions.items()},
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "request_ms": {v: h.summary_ms() for v, h in sorted(self.latency.items())},
            "decisions": {f"{v}/{o}": int(n) for (v, o), n in sorted(self.decisions.items())},
        }


def parse(text: str) -> Scrape:
    """Read the latency histogram and the decision counters out of a /metrics answer."""
    buckets: dict[str, list[tuple[float, float]]] = {}
    counts: dict[str, float] = {}
    sums: dict[str, float] = {}
    decisions: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == LATENCY:
            for s in family.samples:
                verb = s.labels["verb"]
                if s.name.endswith("_bucket"):
                    buckets.setdefault(verb, []).append((float(s.labels["le"]), s.value))
                elif s.name.endswith("_count"):
                    counts[verb] = s.value
                elif s.name.endswith("_sum"):
                    sums[verb] = s.value
        elif family.name == DECISIONS:
            for s in family.samples:
                if s.name.endswith("_total"):
                    decisions[(s.labels["verb"], s.labels["outcome"])] = s.value
    latency = {
        verb: Histogram(tuple(sorted(b)), counts.get(verb, 0.0), sums.get(verb, 0.0))
        for verb, b in buckets.items()
    }
    return Scrape(latency=latency, decisions=decisions)
