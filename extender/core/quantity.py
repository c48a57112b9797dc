"""Kubernetes quantities (temporary: replaced by the exact parser being written on its branch).

`amount(resource, text, field=...)` is the ledger's integer for a resource (cpu in
millicores, rounded up; the rest in units or bytes, rounded up; extended resources whole);
`capacity(value, field=...)` is a whole number 0..2^63-1. Errors are InvalidQuantity naming
the field.
"""

from __future__ import annotations

import re
from fractions import Fraction

MAX = 2**63 - 1
_Q = re.compile(r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d{1,3})?$")
_BIN = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DEC = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


class InvalidQuantity(ValueError):
    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def is_extended(resource: str) -> bool:
    return "/" in resource and not resource.startswith(("kubernetes.io/", "hugepages-"))


def parse(text: object, *, field: str) -> Fraction:
    if not isinstance(text, str) or len(text) > 64:
        raise InvalidQuantity(f"{field}: {str(text)[:40]!r} is not a quantity", field)
    m = _Q.match(text)
    if not m:
        raise InvalidQuantity(f"{field}: {text[:40]!r} is not a quantity", field)
    sign, num, suffix = m.groups()
    value = Fraction(num)
    if suffix in _BIN:
        value *= _BIN[suffix]
    elif suffix in _DEC:
        value *= Fraction(10) ** _DEC[suffix]
    elif suffix:
        value *= Fraction(10) ** int(suffix[1:])
    if sign == "-" and value:
        raise InvalidQuantity(f"{field}: {text!r} is negative", field)
    if value > MAX:
        raise InvalidQuantity(f"{field}: {text!r} is above 2^63-1", field)
    return value


def amount(resource: str, text: object, *, field: str) -> int:
    value = parse(text, field=field)
    if resource == "cpu":
        value *= 1000
    elif is_extended(resource) and value.denominator != 1:
        raise InvalidQuantity(f"{field}: {text!r} must be a whole number", field)
    return -(-value.numerator // value.denominator)


def capacity(value: object, *, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidQuantity(f"{field}: {str(value)[:40]!r} is not a whole number", field)
    v = value if isinstance(value, int) else parse(value, field=field)
    if v != int(v) or not 0 <= v <= MAX:
        raise InvalidQuantity(f"{field}: {value!r} must be a whole number in 0..2^63-1", field)
    return int(v)
