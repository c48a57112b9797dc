"""Resource names and amounts: Kubernetes quantities to the ledger's integers.

The ledger counts in integers: cpu in millicores, memory and storage in bytes, everything
else (pods, extended resources) in whole units. This module converts Kubernetes quantities
and Pod specs into those integers, and validates extended-resource names. Called by the HTTP
routes, the filters and the cluster view; pure, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Any

from kubernetes.utils.quantity import parse_quantity as _untyped_parse_quantity

# The kubernetes client's own quantity parser (untyped; it returns a Decimal).
parse_quantity: Callable[[object], Decimal] = _untyped_parse_quantity

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
PHYSICAL = (CPU, MEMORY, PODS)

# The name part of a qualified name (k8s.io/apimachinery validation.IsQualifiedName).
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class InvalidResource(ValueError):
    """A resource name or quantity that Kubernetes would not accept; the message names it."""


def validate_short_name(name: str) -> str:
    """Check the part after `<domain>/`, as Kubernetes validates extended-resource names."""
    if not name or len(name) > 63 or not _NAME.match(name):
        raise InvalidResource(
            f"resource name {name!r} is invalid: it must be 1-63 characters of [A-Za-z0-9-_.], "
            "starting and ending with an alphanumeric character"
        )
    return name


def full_name(domain: str, name: str) -> str:
    return f"{domain}/{validate_short_name(name)}"


def amount(resource: str, quantity: object) -> int:
    """A quantity as the ledger's integer for `resource` (cpu in millicores).

    Rounds up, as kube-scheduler does for fractional byte quantities.
    """
    try:
        value = parse_quantity(quantity)
    except (ValueError, TypeError, InvalidOperation) as e:
        raise InvalidResource(f"{resource}: invalid quantity {quantity!r}") from e
    if resource == CPU:
        value *= 1000
    return int(value.to_integral_value(rounding=ROUND_CEILING))


def whole_amount(resource: str, quantity: object) -> int:
    """An extended-resource quantity: Kubernetes requires a whole number >= 0."""
    try:
        value = parse_quantity(quantity)
    except (ValueError, TypeError, InvalidOperation) as e:
        raise InvalidResource(f"{resource}: invalid quantity {quantity!r}") from e
    if value < 0 or value != value.to_integral_value():
        raise InvalidResource(f"{resource}: quantity {quantity!r} must be a whole number >= 0")
    return int(value)


def amounts(resources: Mapping[str, Any]) -> dict[str, int]:
    """A ResourceList ({name: quantity}) as ledger integers."""
    return {name: amount(name, q) for name, q in resources.items()}


def _container_amounts(container: Mapping[str, Any]) -> dict[str, int]:
    res = container.get("resources") or {}
    # Extended resources are asked for in limits (requests, if set, must equal them);
    # cpu and memory count by requests, defaulting to limits as the API server does.
    merged: dict[str, Any] = dict(res.get("limits") or {})
    merged.update(res.get("requests") or {})
    return amounts(merged)


def pod_amounts(pod: Mapping[str, Any]) -> dict[str, int]:
    """What a pod occupies on its node, as kube-scheduler computes it.

    max(sum over containers, each init container) per resource, plus overhead, plus one pod.
    Raises InvalidResource naming the field when the spec is malformed.
    """
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise InvalidResource("Pod.spec is missing or not an object")
    total: dict[str, int] = {}
    for c in _containers(spec, "containers"):
        for name, v in _container_amounts(c).items():
            total[name] = total.get(name, 0) + v
    for c in _containers(spec, "initContainers"):
        for name, v in _container_amounts(c).items():
            total[name] = max(total.get(name, 0), v)
    for name, v in amounts(spec.get("overhead") or {}).items():
        total[name] = total.get(name, 0) + v
    total[PODS] = 1
    return {k: v for k, v in total.items() if v}


def _containers(spec: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    items = spec.get(key) or []
    if not isinstance(items, list) or not all(isinstance(c, Mapping) for c in items):
        raise InvalidResource(f"Pod.spec.{key} must be a list of objects")
    return items


def split(all_amounts: Mapping[str, int], domain: str) -> tuple[dict[str, int], dict[str, int]]:
    """(ephemeral, other): the resources under `domain`, and the rest."""
    prefix = domain + "/"
    eph: dict[str, int] = {}
    other: dict[str, int] = {}
    for k, v in all_amounts.items():
        (eph if k.startswith(prefix) else other)[k] = v
    return eph, other


def format_amount(resource: str, value: int) -> str:
    """The ledger's integer back as a Kubernetes quantity string."""
    if resource == CPU:
        return f"{value}m" if value % 1000 else str(value // 1000)
    return str(value)


__all__ = [
    "CPU",
    "MEMORY",
    "PHYSICAL",
    "PODS",
    "InvalidResource",
    "amount",
    "amounts",
    "format_amount",
    "full_name",
    "pod_amounts",
    "split",
    "validate_short_name",
    "whole_amount",
]
