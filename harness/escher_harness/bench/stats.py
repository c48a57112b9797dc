"""Summary statistics shared by the benchmarks: percentiles of a sample (nearest-rank), and
the spread of a figure over repetitions."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(sample: Sequence[float], p: float) -> float:
    """The nearest-rank p-th percentile (0 < p <= 100) of a non-empty sample."""
    if not sample:
        raise ValueError("percentile of an empty sample")
    ordered = sorted(sample)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(sample: Sequence[float]) -> dict[str, float]:
    """p50 / p90 / p99 / max and the count, rounded for reports."""
    return {
        "n": len(sample),
        "p50": round(percentile(sample, 50), 4),
        "p90": round(percentile(sample, 90), 4),
        "p99": round(percentile(sample, 99), 4),
        "max": round(max(sample), 4),
    }


def spread(values: Sequence[float]) -> dict[str, float]:
    """The median, min and max of a figure over repetitions, rounded for reports."""
    if not values:
        raise ValueError("spread of no repetitions")
    ordered = sorted(values)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {
        "n": len(ordered),
        "median": round(median, 4),
        "min": round(ordered[0], 4),
        "max": round(ordered[-1], 4),
    }
