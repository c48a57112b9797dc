"""Who may call the policy API: the outcome of checking a caller, as a value.

The Authorizer (extender.cluster.auth) decides it, with a static token or a
TokenReview and a SubjectAccessReview; the service passes it up and the HTTP layer
(extender.http.deps) maps it to 401, 403 or 503. Pure, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Outcome(StrEnum):
    ALLOWED = "allowed"
    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"
    UNAVAILABLE = "unavailable"  # the API server could not be asked


@dataclass(frozen=True, slots=True)
class AuthDecision:
    outcome: Outcome
    reason: str = ""
    user: str = ""
