"""The verdicts on the paper's claims: each claim is a bound on one measured figure (a
median over repetitions, or a ratio of two), and its verdict says "holds" (within the
bound), "holds within x%" (over it by at most the tolerance, x the excess), or "does not
hold", always with the measured value and the bound. A figure not measured gets "not
measured" and why. Used by escher_harness.bench.paper.report; unit-tested on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

# How far over a bound a figure may be and still "hold within x%".
TOLERANCE: Final = 0.10


@dataclass(frozen=True)
class Verdict:
    claim: str
    outcome: str  # "holds", "holds within x%", "does not hold", "not measured"
    detail: str

    def line(self) -> str:
        return f"- {self.claim}: **{self.outcome}** ({self.detail})"


def at_most(
    claim: str, measured: float | None, bound: float, unit: str, tolerance: float = TOLERANCE
) -> Verdict:
    """`measured` against the claim that it is at most `bound`."""
    if measured is None:
        return Verdict(claim, "not measured", "no value")
    shown = f"measured {_num(measured)}{unit}, bound {_num(bound)}{unit}"
    if measured <= bound:
        return Verdict(claim, "holds", shown)
    excess = measured / bound - 1 if bound > 0 else float("inf")
    if excess <= tolerance:
        return Verdict(claim, f"holds within {excess * 100:.0f}%", shown)
    times = f": {measured / bound:.3g}x the bound" if bound > 0 else ""
    return Verdict(claim, "does not hold", shown + times)


def ratio(series: Mapping[int, float], high: int, low: int) -> float | None:
    """series[high] / series[low], None if either is missing or the divisor is 0."""
    if high not in series or low not in series or not series[low]:
        return None
    return series[high] / series[low]


def spread_ratio(series: Mapping[int, float]) -> float | None:
    """max / min over the series (1.0: flat); None with fewer than two points."""
    values = list(series.values())
    if len(values) < 2 or min(values) <= 0:
        return None
    return max(values) / min(values)


def _num(x: float) -> str:
    return f"{x:.3g}"
