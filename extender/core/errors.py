"""The core's error taxonomy: why a policy change or a request cannot be applied.

Each error names the field at fault (`field`, a dotted path, or None) and nothing was changed
when one is raised. Decisions about pods are not errors: a filter that turns a node away
returns a Rejection (extender.core.pod). The HTTP status of each error is chosen in one table
at the edge (extender.http.errors), never here. Raised by the ledger, the policy logic and
the parsers of names and quantities (extender.core.quantity.InvalidQuantity is the same kind
of error as InvalidValue).
"""

from __future__ import annotations


class CoreError(Exception):
    """Base of the core's errors; `field` names the offending field."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InvalidValue(CoreError):
    """A value Kubernetes or the extender would not accept (a resource name, a domain)."""


class UnknownNode(CoreError):
    """A policy change names a node the extender does not know."""

    def __init__(self, nodes: list[str], field: str = "node") -> None:
        self.nodes = sorted(nodes)
        shown = ", ".join(repr(n[:64]) for n in self.nodes[:5])
        more = f" and {len(self.nodes) - 5} more" if len(self.nodes) > 5 else ""
        super().__init__(f"unknown node(s): {shown}{more}", field)


class NoMatch(CoreError):
    """A selector or resource vector that matches no node."""


class NotFound(CoreError):
    """What was asked for does not exist (a resource no node has)."""


class Conflict(CoreError):
    """The change contradicts what is held now (capacity below allocated, a held resource
    deleted without force)."""


class Unavailable(CoreError):
    """Where the change would be kept cannot be reached now (the API server is away); it
    was not taken."""
