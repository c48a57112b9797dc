"""What the routes depend on: the runtime they serve, readiness, and who the caller is.

Routes see the service through the Runtime protocol only (extender.service.Service is the
implementation, set on app.state by extender.app), so this layer imports no adapter. Every
dependency here is async and O(1) (authentication answers from a cache, or awaits the API
server without holding a thread): probes and binds never queue behind policy calls.
"""

from __future__ import annotations

from typing import Annotated, Protocol

from fastapi import Depends, Request, Security, params
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from extender.core.ledger import Ledger
from extender.esl.registry import Instances
from extender.gang.manager import GangManager
from extender.http.errors import NotReady, Unauthorized
from extender.metrics import Metrics
from extender.settings import Settings
from extender.verbs import Verbs


class Runtime(Protocol):
    settings: Settings
    metrics: Metrics
    ledger: Ledger
    verbs: Verbs
    gangs: GangManager
    esls: Instances

    def ready(self) -> tuple[bool, str]:
        """(ready, why not): the ledger is rebuilt and this replica leads (or runs alone)."""
        ...

    def alive(self) -> tuple[bool, str]:
        """(alive, why not): the event loop and the service's tasks are running."""
        ...

    async def wait_durable(self, version: int, nodes: list[str]) -> bool:
        """True once those nodes hold the ledger's state as of `version`, False when the
        configured wait runs out first (the write-back keeps trying)."""
        ...

    async def authorize(self, token: str | None, verb: str, subresource: str) -> None:
        """Raise Unauthorized or Forbidden unless the bearer `token` may do `verb` on the
        policy API's `subresource` (resources, esl, gangs, metrics)."""
        ...


def runtime(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


RuntimeDep = Annotated[Runtime, Depends(runtime)]


async def ready(rt: RuntimeDep) -> None:
    """503 until the ledger is rebuilt and while this replica is not the leader: the verbs
    and policy calls must not decide over a half-built ledger; kube-scheduler retries."""
    ok, why = rt.ready()
    if not ok:
        raise NotReady(f"not ready: {why}")


def bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("the Authorization header must be 'Bearer <token>'")
    return token.strip()


_VERBS = {"GET": "get", "HEAD": "get", "PUT": "update", "POST": "create", "DELETE": "delete"}


# Declares the bearer scheme in the OpenAPI document (so a client, or a fuzzer, knows which
# routes take a token); `bearer` reads the header itself, to refuse a malformed one by name.
_SCHEME = HTTPBearer(
    auto_error=False,
    description="The policy API's token, or with kubernetes_auth a Kubernetes bearer token.",
)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(_SCHEME)]


def caller(subresource: str) -> params.Depends:
    """A dependency: the caller may do this request's verb on `subresource`."""

    async def check(request: Request, rt: RuntimeDep, _: Credentials) -> None:
        await rt.authorize(bearer(request), _VERBS.get(request.method, "get"), subresource)

    dependency: params.Depends = Depends(check)
    return dependency
