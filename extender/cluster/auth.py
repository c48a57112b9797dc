"""Who may call the policy API, the Kubernetes way: TokenReview, then SubjectAccessReview.

A caller presents a bearer token: its ServiceAccount token or a user's. The API server says
whose it is (TokenReview), then whether that user may do the request's verb on what the
route changes (SubjectAccessReview): `ephemeralresources.<domain>` for /v1/resources and
/v1/cluster-state, `esls.<domain>` for /v1/esl (the CRDs' own resources, so one ClusterRole
governs the objects and the HTTP façade over them), and the subresources
`ephemeralresources/gangs` and `/metrics` for what no object holds (docs/policy-api.md has
the ClusterRole to grant). Answers are cached for a few seconds, bounded in number, so the
API server is asked once per caller and verb, not per request. A static token (the embedded
cluster's) may be configured beside it. Decisions are values (AuthDecision); the service
turns a refusal into the HTTP layer's error. Called by extender.service.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable

import msgspec

from extender.core.access import AuthDecision, Outcome
from extender.kube.client import ApiError, KubeAPI

# The policy API's parts, as RBAC sees them: (resource, subresource).
TARGETS = {
    "resources": ("ephemeralresources", ""),
    "esl": ("esls", ""),
    "gangs": ("ephemeralresources", "gangs"),
    "metrics": ("ephemeralresources", "metrics"),
}
_CACHE_MAX = 10_000


class _User(msgspec.Struct):
    username: str = ""
    uid: str = ""
    groups: list[str] = []
    extra: dict[str, list[str]] = {}


class _TokenReviewStatus(msgspec.Struct):
    authenticated: bool = False
    user: _User = msgspec.field(default_factory=_User)
    error: str = ""


class _TokenReview(msgspec.Struct):
    status: _TokenReviewStatus = msgspec.field(default_factory=_TokenReviewStatus)


class _SARStatus(msgspec.Struct):
    allowed: bool = False
    reason: str = ""


class _SAR(msgspec.Struct):
    status: _SARStatus = msgspec.field(default_factory=_SARStatus)


class Authorizer:
    def __init__(
        self,
        api: KubeAPI | None,
        domain: str,
        static_token: str | None,
        ttl: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._clock = clock
        self._domain = domain
        self._static = static_token.encode() if static_token else None
        self._ttl = ttl
        self._users: OrderedDict[bytes, tuple[float, _User | None, str]] = OrderedDict()
        self._grants: OrderedDict[tuple[str, str, str], tuple[float, bool, str]] = OrderedDict()

    @property
    def open(self) -> bool:
        """No credential configured: every caller is let in (a development set-up)."""
        return self._static is None and self._api is None

    async def decide(self, token: str | None, verb: str, target: str) -> AuthDecision:
        """Whether `token` may do `verb` on `target`, one of TARGETS."""
        if self.open:
            return AuthDecision(Outcome.ALLOWED)
        if token is None:
            return AuthDecision(Outcome.UNAUTHENTICATED, "a bearer token is required")
        raw = token.encode("utf-8", "surrogateescape")
        if self._static is not None and secrets.compare_digest(raw, self._static):
            return AuthDecision(Outcome.ALLOWED, user="static-token")
        if self._api is None:
            return AuthDecision(Outcome.UNAUTHENTICATED, "wrong bearer token")
        try:
            user, why = await self._review(raw, token)
            if user is None:
                return AuthDecision(Outcome.UNAUTHENTICATED, why or "the token is not valid")
            allowed, why = await self._access(user, verb, target)
        except ApiError as e:
            return AuthDecision(Outcome.UNAVAILABLE, f"cannot check the caller: {e}")
        if not allowed:
            resource, sub = TARGETS[target]
            return AuthDecision(
                Outcome.FORBIDDEN,
                f"{user.username} may not {verb} {resource}.{self._domain}"
                + (f"/{sub}" if sub else "")
                + (f": {why}" if why else ""),
                user.username,
            )
        return AuthDecision(Outcome.ALLOWED, user=user.username)

    async def _review(self, raw: bytes, token: str) -> tuple[_User | None, str]:
        now = self._clock()
        hit = self._users.get(raw)
        if hit is not None and hit[0] > now:
            return hit[1], hit[2]
        body = msgspec.json.encode(
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            }
        )
        reply = await self._api_call("/apis/authentication.k8s.io/v1/tokenreviews", body)
        status = msgspec.json.decode(reply, type=_TokenReview).status
        user = status.user if status.authenticated else None
        _put(self._users, raw, (now + self._ttl, user, status.error))
        return user, status.error

    async def _access(self, user: _User, verb: str, target: str) -> tuple[bool, str]:
        now = self._clock()
        key = (user.uid or user.username, verb, target)
        resource, subresource = TARGETS[target]
        hit = self._grants.get(key)
        if hit is not None and hit[0] > now:
            return hit[1], hit[2]
        body = msgspec.json.encode(
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": user.username,
                    "uid": user.uid,
                    "groups": user.groups,
                    "extra": user.extra,
                    "resourceAttributes": {
                        "group": self._domain,
                        "resource": resource,
                        "subresource": subresource,
                        "verb": verb,
                    },
                },
            }
        )
        reply = await self._api_call("/apis/authorization.k8s.io/v1/subjectaccessreviews", body)
        status = msgspec.json.decode(reply, type=_SAR).status
        _put(self._grants, key, (now + self._ttl, status.allowed, status.reason))
        return status.allowed, status.reason

    async def _api_call(self, path: str, body: bytes) -> bytes:
        assert self._api is not None
        return await self._api.request("POST", path, body=body, what="authorizing a caller")


def _put(cache: OrderedDict, key: object, value: object) -> None:  # type: ignore[type-arg]
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > _CACHE_MAX:
        cache.popitem(last=False)
