"""Kubernetes quantities, parsed exactly as the API server parses them, and bounded.

The grammar and the rounding are k8s.io/apimachinery's (pkg/api/resource, v0.37.1:
ParseQuantity, parseQuantityString, the suffixer): an optional sign; digits, an optional
fraction; a suffix among the binary `Ki Mi Gi Ti Pi Ei`, the decimal `n u m k M G T P E` and
none, or a decimal exponent `e`/`E` with an optional sign. Non-zero values are rounded up to a
whole nano (1n), as ParseQuantity does. Odd corners are kept: an empty number is 0 (`"."`,
`"k"`, `"+"`), `"1."` is 1.

Hostile input is refused before any big-number arithmetic: the value is a JSON string of at
most MAX_TEXT characters; an exponent that would put a non-zero value above 2^63-1 is refused
at once, one that would put it below a nano makes it a nano, so the exact arithmetic below
(Python integers and Fractions) only ever sees a few dozen digits. Non-finite spellings
(`NaN`, `Infinity`) are not in the grammar. Negative values are refused: nothing the extender
reads may be negative.

The ledger counts in integers: cpu in millicores (MilliValue, rounded up), every other
resource in its unit (Value, rounded up): bytes for memory, storage and hugepages, units for
pods and extended resources. Kubernetes requires whole numbers for pods and extended
resources; a fraction there is refused, not rounded. Every count stays within 2^63-1.

Errors are InvalidQuantity, naming the field (a dotted path given by the caller) and what is
wrong, with the value shown truncated. Called wherever a quantity enters the extender: pod
requests (extender.core.podrequests), nodes' allocatable (extender.cluster.view), the policy
API's capacities and node_spec (extender.policies.api), ESL parameters (extender.esl.base). Pure.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction

MAX = 2**63 - 1
MAX_TEXT = 128
# Beyond these decimal exponents a non-zero value is above MAX, or below a nano (however
# many digits it has: at most MAX_TEXT).
_MAX_EXP = 19 + MAX_TEXT
_MIN_EXP = -(9 + MAX_TEXT)
_NANO = 10**9

_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<num>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?",
    re.ASCII,
)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# Whole numbers only (k8s.io/kubernetes pkg/apis/core/helper: integerResources, plus every
# extended resource).
_INTEGER = frozenset({"pods", "services", "replicationcontrollers", "resourcequotas",
                      "secrets", "configmaps", "persistentvolumeclaims"})  # fmt: skip


class InvalidQuantity(ValueError):
    """A quantity Kubernetes (or the extender) would not accept; `field` names where."""

    def __init__(self, field: str, value: object, problem: str) -> None:
        shown = str(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        super().__init__(f"{field}: {shown!r} {problem}")
        self.field = field


def is_extended(resource: str) -> bool:
    """Kubernetes' IsExtendedResourceName: a domain-prefixed name outside kubernetes.io."""
    return (
        "/" in resource
        and "kubernetes.io/" not in resource
        and not resource.startswith("requests.")
    )


def is_integer(resource: str) -> bool:
    """Whether Kubernetes requires whole numbers of `resource` (IsIntegerResourceName)."""
    return resource in _INTEGER or is_extended(resource)


def parse(text: object, *, field: str) -> Fraction:
    """The exact, non-negative value of a quantity string (rounded up to a whole nano)."""
    if not isinstance(text, str):
        raise InvalidQuantity(field, text, "is not a quantity: it must be a JSON string")
    if len(text) > MAX_TEXT:
        raise InvalidQuantity(field, text, f"is longer than {MAX_TEXT} characters")
    value = _value(text)
    if isinstance(value, str):
        raise InvalidQuantity(field, text, value)
    return value


@functools.lru_cache(maxsize=4096)
def _value(text: str) -> Fraction | str:
    """The value of a quantity string of at most MAX_TEXT characters, or what is wrong with
    it. Cached: the same few spellings ("100m", "64Mi", "1") arrive with every pod, and a
    Fraction is immutable. The cache holds at most 4096 short strings and their values."""
    m = _QUANTITY.fullmatch(text)
    if m is None or text == "":
        return "is not a quantity"
    digits = (m["num"] or "") + (m["frac"] or "")
    mantissa = int(digits) if digits else 0
    if mantissa == 0:
        return Fraction(0)
    if m["sign"] == "-":
        return "must not be negative"
    suffix = m["suffix"] or ""
    exp10 = -len(m["frac"] or "")
    exp2 = _BINARY.get(suffix, 0)
    if suffix in _DECIMAL:
        exp10 += _DECIMAL[suffix]
    elif suffix[:1] in ("e", "E") and suffix not in _BINARY:
        written = suffix[1:]
        # Bounded before int(): an exponent of more digits than this is out of range anyway.
        if len(written.lstrip("+-").lstrip("0")) > 6:
            if written.startswith("-"):
                return Fraction(1, _NANO)
            return "is above 2^63-1"
        exp10 += int(written)
    if exp10 + len(str(mantissa)) > _MAX_EXP:
        return "is above 2^63-1"
    if exp10 < _MIN_EXP:
        return Fraction(1, _NANO)  # non-zero: rounded up to the smallest value, 1n
    value = Fraction(mantissa * 2**exp2) * Fraction(10) ** exp10
    nanos = -((-value * _NANO) // 1)  # ceil: ParseQuantity rounds up to a whole nano
    value = Fraction(nanos, _NANO)
    if value > MAX:
        return "is above 2^63-1"
    return value


def amount(resource: str, text: object, *, field: str) -> int:
    """The ledger's integer for `resource`: millicores for cpu, else the unit, rounded up
    (MilliValue / Value); whole numbers only for pods and extended resources."""
    value = parse(text, field=field)
    if resource == "cpu":
        value *= 1000
    elif is_integer(resource) and value.denominator != 1:
        raise InvalidQuantity(field, text, f"must be a whole number of {resource}")
    count = -((-value) // 1)
    if count > MAX:
        raise InvalidQuantity(field, text, "is above 2^63-1 in the ledger's units")
    return int(count)


def capacity(value: object, *, field: str) -> int:
    """A count of units given as a JSON integer or a quantity string: 0..2^63-1."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidQuantity(field, value, "must be a whole number")
    if isinstance(value, int):
        if not 0 <= value <= MAX:
            raise InvalidQuantity(field, value, "must be a whole number in 0..2^63-1")
        return value
    exact = parse(value, field=field)
    if exact.denominator != 1:
        raise InvalidQuantity(field, value, "must be a whole number")
    return int(exact)
