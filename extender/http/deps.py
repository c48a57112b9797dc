"""What the routes depend on: the runtime they serve, readiness, and who the caller is.

Routes see the service through the Runtime protocol only (extender.service.Service is the
implementation, set on app.state by extender.app), so this layer imports no Kubernetes side. Every
dependency here is async and O(1) (authentication answers from a cache, or awaits the API
server without holding a thread): probes and binds never queue behind policy calls.
"""

from __future__ import annotations

from typing import Annotated, Protocol

from fastapi import Depends, Request, Security, params
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from extender.core.access import AuthDecision, Outcome
from extender.core.ledger import Ledger
from extender.esl.registry import Instances
from extender.gang import Gangs
from extender.http.errors import Forbidden, NotConfirmed, NotReady, Unauthorized
from extender.metrics import Metrics
from extender.policies.store import PolicyStore
from extender.scheduling.verbs import Verbs
from extender.settings import Settings


class Runtime(Protocol):
    settings: Settings
    metrics: Metrics
    ledger: Ledger
    verbs: Verbs
    gangs: Gangs
    esls: Instances
    store: PolicyStore

    def ready(self) -> tuple[bool, str]:
        """(ready, why not): the ledger is rebuilt and this replica leads (or runs alone)."""
        ...

    def accepting(self) -> tuple[bool, str]:
        """(accepting, why not): a policy change taken now can reach the nodes before this
        replica would have to step down (with leader election: its lease renewals are
        answered)."""
        ...

    def alive(self) -> tuple[bool, str]:
        """(alive, why not): the event loop and the service's tasks are running."""
        ...

    async def wait_durable(self, version: int, nodes: list[str]) -> bool:
        """True once those nodes hold the ledger's state as of `version`, False when the
        configured wait runs out first (the write-back keeps trying)."""
        ...

    async def authorize(self, token: str | None, verb: str, target: str) -> AuthDecision:
        """Whether the bearer `token` may do `verb` on the policy API's part `target`
        (resources, esl, gangs, metrics)."""
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


_READS = frozenset({"GET", "HEAD"})


async def accepting(request: Request, rt: RuntimeDep) -> None:
    """503, changing nothing, for a policy change this replica could not make durable
    before it steps down (leader election, the API server not answering its renewals)."""
    if request.method in _READS:
        return
    ok, why = rt.accepting()
    if not ok:
        raise NotReady(why)


def settled(rt: Runtime, durable: bool, ok: int = 200) -> int:
    """The status of a policy change's reply: `ok` once on the nodes; else 202 (applied,
    the write-back keeps trying) when the change cannot be lost, that is with one replica.
    With leader election a change not on the nodes is dropped if the replica steps down
    first, so it is not acknowledged: NotConfirmed (503), outcome unknown, retry."""
    if durable:
        return ok
    if not rt.settings.leader_election.leader_elect:
        return 202
    wait = rt.settings.writeback.wait_seconds
    raise NotConfirmed(
        f"the change is not confirmed on the nodes after {wait:g}s (is the API server "
        "away?): this replica keeps writing it while it leads, but drops it if it steps "
        "down first, so it may or may not take effect; retry it (setting a value twice "
        "is harmless) or read the state"
    )


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


def caller(target: str) -> params.Depends:
    """A dependency: the caller may do this request's verb on `target` (resources, esl,
    gangs, metrics: extender.cluster.auth.TARGETS says what RBAC calls them)."""

    async def check(request: Request, rt: RuntimeDep, _: Credentials) -> None:
        decision = await rt.authorize(bearer(request), _VERBS.get(request.method, "get"), target)
        match decision.outcome:
            case Outcome.UNAUTHENTICATED:
                raise Unauthorized(decision.reason)
            case Outcome.FORBIDDEN:
                raise Forbidden(decision.reason)
            case Outcome.UNAVAILABLE:
                raise NotReady(decision.reason)

    dependency: params.Depends = Depends(check)
    return dependency
