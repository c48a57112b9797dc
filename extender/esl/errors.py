"""The ESLs' error taxonomy: why an ESL call cannot be done. Nothing was changed.

Each names the offending field (`field`); the HTTP status of each is chosen at the edge
(extender.http.errors). Refusals of the backend below an ESL are the core's own errors
(extender.core.errors: UnknownNode, Conflict, NoMatch, ...), raised through unchanged.
Raised by the ESLs, their registry and store (extender.esl.registry).
"""

from __future__ import annotations


class ESLError(Exception):
    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InvalidParameters(ESLError):
    """Parameters that fail validation; `field` names the first offending one."""


class Unsatisfiable(ESLError):
    """Parameters that no cluster state can ever satisfy (not even an empty cluster)."""


class NoRoom(ESLError):
    """Not possible now, but could be once the cluster has room: retry later."""


class UnknownKey(ESLError):
    """requests_for / signal with a key (group, queue, user, stage) the ESL does not have."""


class UnknownKind(ESLError):
    """No ESL of that kind is registered."""


class InstanceNotFound(ESLError):
    pass


class InstanceExists(ESLError):
    pass


class Unsupported(ESLError):
    """The instance cannot do that (a step of a static policy, a signal to one with none)."""


class TooMany(ESLError):
    """The service runs as many ESL instances as it is configured to allow."""
