"""Where the policy API's changes go: the PolicyStore protocol and its in-memory store.

The routes of /v1/resources and /v1/esl (extender.http.policy, extender.http.esl) change
policies only through a PolicyStore. Two implement it:

- MemoryStore, here: the ledger and the ESL instances in this process are the intent, as in
  the standalone mode (and with `policy_objects` off). A change is applied to the ledger in a
  worker thread, then the write-back's confirmation is awaited.
- ObjectStore (extender.policies.kube): the intent is kept in EphemeralResource and ESL
  objects; the store writes the object and reconciles it at once, so a failover loses nothing.

Both answer with the same results and raise the same core and ESL errors, so the HTTP layer
renders them the same way. Built by extender.service.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from starlette.concurrency import run_in_threadpool

from extender.core.errors import InvalidValue
from extender.core.ledger import Ledger
from extender.esl.registry import Applied, Instances
from extender.policies import api as policy
from extender.policies.api import DeleteResourceResult, ResourceSpec, SetResourceResult

WaitDurable = Callable[[int, list[str]], Awaitable[bool]]


class PolicyStore(Protocol):
    async def set_resource(
        self, name: str, spec: ResourceSpec, resource_version: str | None = None
    ) -> SetResourceResult:
        """ESCHER's set_resource; `durable` False once the wait for the nodes ran out. With
        `resource_version`, only over the policy's object at that version (Conflict if it
        moved on)."""
        ...

    async def delete_resource(
        self, name: str, force: bool, resource_version: str | None = None
    ) -> DeleteResourceResult:
        """Remove it from every node; with `resource_version`, only the policy's object at
        that version (Conflict if it moved on)."""
        ...

    async def create_esl(self, kind: str, body: Any) -> Applied: ...

    async def step_esl(self, iid: str, backlog: Mapping[str, int] | None) -> Applied: ...

    async def signal_esl(self, iid: str, key: str) -> Applied: ...

    async def delete_esl(self, iid: str) -> Applied: ...


class MemoryStore:
    """The ledger and the instances are the intent (nothing outlives the process but what
    the write-back put on the nodes)."""

    def __init__(
        self, ledger: Ledger, domain: str, esls: Instances, wait: WaitDurable, learn: bool
    ) -> None:
        self.ledger = ledger
        self.domain = domain
        self.esls = esls
        self._wait = wait
        self._learn = learn

    async def set_resource(
        self, name: str, spec: ResourceSpec, resource_version: str | None = None
    ) -> SetResourceResult:
        _no_objects(resource_version)
        full, capacity, version = await run_in_threadpool(
            policy.set_resource, self.ledger, self.domain, name, spec, self._learn
        )
        durable = await self._wait(version, list(capacity))
        return SetResourceResult(resource=full, nodes=capacity, version=version, durable=durable)

    async def delete_resource(
        self, name: str, force: bool, resource_version: str | None = None
    ) -> DeleteResourceResult:
        _no_objects(resource_version)
        full, nodes, version = await run_in_threadpool(
            policy.delete_resource, self.ledger, self.domain, name, force
        )
        durable = await self._wait(version, nodes)
        return DeleteResourceResult(resource=full, removed_from=nodes, durable=durable)

    # ESL calls wait for the write-back inside their worker thread (LedgerBackend).
    async def create_esl(self, kind: str, body: Any) -> Applied:
        return await run_in_threadpool(self.esls.create, kind, body)

    async def step_esl(self, iid: str, backlog: Mapping[str, int] | None) -> Applied:
        return await run_in_threadpool(self.esls.step, iid, backlog)

    async def signal_esl(self, iid: str, key: str) -> Applied:
        return await run_in_threadpool(self.esls.signal, iid, key)

    async def delete_esl(self, iid: str) -> Applied:
        return await run_in_threadpool(self.esls.delete, iid)


def _no_objects(resource_version: str | None) -> None:
    if resource_version is not None:
        raise InvalidValue(
            "resourceVersion is a precondition on the policy's EphemeralResource object: "
            "policies are not kept as objects here (policy_objects off, or standalone)",
            "resourceVersion",
        )
