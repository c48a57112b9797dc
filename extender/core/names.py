"""Resource names: the physical ones the ledger counts and the extended ones it owns.

Ephemeral resources are extended resources `<domain>/<name>`: the domain is the service's
(settings.resource_domain, a DNS subdomain outside kubernetes.io) and the name follows
Kubernetes' qualified-name rules. Called by the policy API, the ESLs and the cluster view;
pure, no I/O.
"""

from __future__ import annotations

import re

from extender.core.errors import InvalidValue

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"

# The name part of a qualified name (k8s.io/apimachinery validation.IsQualifiedName).
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
# A DNS-1123 subdomain, as Kubernetes requires for the prefix of an extended resource name.
_DOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# A node name is a DNS-1123 subdomain too (at most 253 characters).
_NODE_MAX = 253


def check_domain(domain: str) -> str:
    if len(domain) > 253 or not _DOMAIN.match(domain) or domain.endswith("kubernetes.io"):
        raise InvalidValue(
            f"resource domain {domain[:64]!r} must be a DNS subdomain outside kubernetes.io",
            "resource_domain",
        )
    return domain


def check_short_name(name: str, field: str = "name") -> str:
    """The part after `<domain>/`, as Kubernetes validates extended-resource names."""
    if not name or len(name) > 63 or not _NAME.match(name):
        raise InvalidValue(
            f"resource name {name[:64]!r} is invalid: it must be 1-63 characters of "
            "[A-Za-z0-9-_.], starting and ending with an alphanumeric character",
            field,
        )
    return name


def full_name(domain: str, name: str, field: str = "name") -> str:
    return f"{domain}/{check_short_name(name, field)}"


def check_node_name(name: str, field: str = "node") -> str:
    if len(name) > _NODE_MAX or not _DOMAIN.match(name):
        raise InvalidValue(f"node name {name[:64]!r} is not a DNS subdomain", field)
    return name
