"""The distributions a gang workload is drawn from, written as short text on the command line
and in presets, so a scenario prints exactly as it was asked for. Pure, no I/O.

Grammar (every number a decimal):

- `4`: always 4.
- `2:3,4:2,8:1`: a weighted choice of values (value:weight, weights need not sum to 1).
- `uniform:A,B`: uniform in [A, B].
- `exp:MEAN[,MAX]`: exponential with that mean, redrawn above MAX when given.
- `lognormal:MEDIAN,SIGMA[,MAX]`: log-normal with that median and shape, redrawn above MAX.

Member shapes are a weighted choice of `cpu/memory` pairs in Kubernetes quantities:
`1/1Gi:3,2/2Gi:1`. Samples come from the caller's random.Random, so a seed fixes them.
Called by escher_harness.bench.scenario (and so by the presets and the CLI).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from extender.core.names import CPU, MEMORY
from extender.core.quantity import amount

# Redraws before a bounded draw gives up and clips: never reached with sane bounds.
_REDRAWS = 1000


class DistributionError(ValueError):
    """Text that is not a distribution, with the reason."""


@dataclass(frozen=True)
class Distribution:
    """A distribution of non-negative numbers, as written (`text`) and parsed."""

    text: str
    kind: str  # "choice", "uniform", "exp" or "lognormal"
    params: tuple[float, ...]
    weights: tuple[float, ...] = ()  # choice only

    def sample(self, rng: random.Random) -> float:
        if self.kind == "choice":
            return rng.choices(self.params, weights=self.weights)[0]
        if self.kind == "uniform":
            return rng.uniform(self.params[0], self.params[1])
        bound = self.params[-1] if len(self.params) == (2 if self.kind == "exp" else 3) else None
        for _ in range(_REDRAWS):
            if self.kind == "exp":
                x = rng.expovariate(1.0 / self.params[0])
            else:
                x = rng.lognormvariate(math.log(self.params[0]), self.params[1])
            if bound is None or x <= bound:
                return x
        return float(bound or 0.0)

    def mean(self) -> float:
        """The mean before any bound: what a preset's offered load is sized with."""
        if self.kind == "choice":
            return sum(v * w for v, w in zip(self.params, self.weights, strict=True)) / sum(
                self.weights
            )
        if self.kind == "uniform":
            return (self.params[0] + self.params[1]) / 2
        if self.kind == "exp":
            return self.params[0]
        return self.params[0] * math.exp(self.params[1] ** 2 / 2)

    def support_max(self) -> float:
        """The largest value a sample can take (inf when unbounded)."""
        if self.kind == "choice":
            return max(self.params)
        if self.kind == "uniform":
            return self.params[1]
        bounded = len(self.params) == (2 if self.kind == "exp" else 3)
        return self.params[-1] if bounded else math.inf


def parse(text: str) -> Distribution:
    """The distribution `text` names; DistributionError says what is wrong with it."""
    s = text.strip()
    kind, sep, rest = s.partition(":")
    if sep and kind in ("uniform", "exp", "lognormal"):
        params = _numbers(rest, text)
        arity = {"uniform": (2,), "exp": (1, 2), "lognormal": (2, 3)}[kind]
        if len(params) not in arity:
            raise DistributionError(
                f"{text!r}: {kind} takes {' or '.join(map(str, arity))} numbers"
            )
        if kind == "uniform" and params[0] > params[1]:
            raise DistributionError(f"{text!r}: uniform needs A <= B")
        if kind != "uniform" and params[0] <= 0:
            raise DistributionError(f"{text!r}: the {kind}'s first parameter must be > 0")
        if kind == "exp" and len(params) == 2 and params[1] < params[0]:
            raise DistributionError(f"{text!r}: the bound must be at least the mean")
        if kind == "lognormal" and len(params) == 3 and params[2] < params[0]:
            raise DistributionError(f"{text!r}: the bound must be at least the median")
        return Distribution(s, kind, params)
    values, weights = _weighted(s, text)
    return Distribution(s, "choice", tuple(_number(v, text) for v in values), weights)


@dataclass(frozen=True)
class Shapes:
    """A weighted choice of member shapes (cpu, memory), as written."""

    text: str
    shapes: tuple[tuple[str, str], ...]
    weights: tuple[float, ...]

    def sample(self, rng: random.Random) -> tuple[str, str]:
        return rng.choices(self.shapes, weights=self.weights)[0]

    def mean_cpu(self) -> float:
        """Mean cpu per member, in cores."""
        total = sum(
            amount(CPU, cpu, field="cpu") * w
            for (cpu, _), w in zip(self.shapes, self.weights, strict=True)
        )
        return total / sum(self.weights) / 1000


def parse_shapes(text: str) -> Shapes:
    """`cpu/memory[:weight],...`, e.g. `1/1Gi:3,2/2Gi:1`; DistributionError if malformed."""
    values, weights = _weighted(text.strip(), text)
    shapes = []
    for v in values:
        cpu, sep, memory = v.partition("/")
        if not sep or not cpu or not memory:
            raise DistributionError(f"{text!r}: a shape is cpu/memory, e.g. 1/1Gi, not {v!r}")
        try:
            amount(CPU, cpu, field="cpu")
            amount(MEMORY, memory, field="memory")
        except ValueError as e:
            raise DistributionError(f"{text!r}: {e}") from None
        shapes.append((cpu, memory))
    return Shapes(text.strip(), tuple(shapes), weights)


def _weighted(s: str, text: str) -> tuple[list[str], tuple[float, ...]]:
    if not s:
        raise DistributionError("an empty distribution")
    values: list[str] = []
    weights: list[float] = []
    for part in s.split(","):
        value, _, weight = part.strip().rpartition(":") if ":" in part else (part, "", "1")
        w = _number(weight, text)
        if not value.strip() or w <= 0:
            raise DistributionError(f"{text!r}: each choice is value[:weight > 0], not {part!r}")
        values.append(value.strip())
        weights.append(w)
    return values, tuple(weights)


def _numbers(s: str, text: str) -> tuple[float, ...]:
    return tuple(_number(p, text) for p in s.split(","))


def _number(s: str, text: str) -> float:
    try:
        x = float(s)
    except ValueError:
        raise DistributionError(f"{text!r}: {s.strip()!r} is not a number") from None
    if not math.isfinite(x) or x < 0:
        raise DistributionError(f"{text!r}: {s.strip()!r} must be a finite number >= 0")
    return x


def ints(d: Distribution) -> Sequence[int]:
    """The values of a choice of whole numbers (gang sizes); DistributionError otherwise."""
    if d.kind != "choice" or any(v != int(v) or v < 1 for v in d.params):
        raise DistributionError(f"{d.text!r}: gang sizes are a choice of whole numbers >= 1")
    return [int(v) for v in d.params]
