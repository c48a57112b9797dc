"""The object store: policies kept as EphemeralResource and ESL objects, reconciled by the
leader, with the policy API as a façade over them (extender.policies.store.PolicyStore).

`sync()` lists both kinds at start-up (after the cluster view: the ledger must know the
nodes first); `run()` watches them, reconciles what changed while leading, and every
`resync_seconds` queues again what is not settled (a change the write-back could not finish,
an ESL without room, a status whose usage moved). `leading(True)` adopts the resources found
on the nodes without an object, then queues every object: a new leader resumes each ESL
and re-applies each change a previous leader left unconfirmed. `leading(False)` forgets the
running instances (their objects keep them). Built by extender.policies.kube.build when
settings.policy.objects; the service runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from extender.core.ledger import Ledger
from extender.esl.registry import Applied, Instances
from extender.kube.client import ApiError, KubeAPI
from extender.kube.tasks import run_together
from extender.metrics import Metrics
from extender.policies.api import DeleteResourceResult, ResourceSpec, SetResourceResult
from extender.policies.kube.esls import BackendFactory, ESLs
from extender.policies.kube.objects import esl_owner
from extender.policies.kube.resources import Resources
from extender.policies.store import WaitDurable

log = logging.getLogger(__name__)


class ObjectStore:
    def __init__(
        self,
        api: KubeAPI,
        ledger: Ledger,
        domain: str,
        metrics: Metrics,
        instances: Instances,
        backend: BackendFactory,
        wait: WaitDurable,
        may_write: Callable[[], bool],
        resync_seconds: float,
    ) -> None:
        self.instances = instances
        self.domain = domain
        self.resources = Resources(api, ledger, domain, metrics, wait, may_write)
        self.esls = ESLs(api, domain, metrics, instances, self.resources, backend, may_write)
        self.may_write = may_write
        self.resync_seconds = resync_seconds
        self._leading = asyncio.Event()
        self._kick = asyncio.Event()
        self._fresh = True  # adopt, then reconcile everything, at the next leadership

    async def sync(self) -> None:
        """List both kinds (ApiError if the API server fails or the CRDs are missing)."""
        try:
            await self.resources.informer.sync()
            await self.esls.informer.sync()
        except ApiError as e:
            if e.status != 404:
                raise
            # Retried by the caller (the CRDs may be on their way), and said plainly.
            raise ApiError(
                404,
                f"the CRDs ephemeralresources.{self.domain} and esls.{self.domain} are not "
                f"installed (deploy/crds; or run with policy_objects off): {e}",
                "policy objects",
            ) from e

    async def run(self) -> None:
        self.esls.start()
        try:
            await run_together(
                (
                    (self.resources.informer.run(), "watch-ephemeralresources"),
                    (self.esls.informer.run(), "watch-esls"),
                    (self.resources.run(), "reconcile-ephemeralresources"),
                    (self.esls.run(), "reconcile-esls"),
                    (self._resync(), "resync-policies"),
                )
            )
        finally:
            await self.resources.aclose()
            await self.esls.aclose()

    def node_added(self, node: str) -> None:
        """A node the ledger did not have appeared (the cluster view, after its first sync)."""
        self.resources.node_added(node)

    def leading(self, leading: bool) -> None:
        if leading:
            self._fresh = True
            self._leading.set()
            self._kick.set()
            return
        self._leading.clear()
        dropped = self.instances.forget()
        if dropped:
            log.info(
                "stepped down: ESL instances left to the next leader", extra={"count": dropped}
            )

    async def _resync(self) -> None:
        while True:
            await self._leading.wait()
            if self._fresh and self.may_write():
                claimed = {n for n, r in self.resources.cache.items() if esl_owner(r)}
                try:
                    await self.resources.adopt(claimed)
                    self._fresh = False
                except Exception as e:  # tried again at the next resync
                    log.warning("adoption failed; retrying", extra={"error": str(e)})
                self.resources.everything()
                self.esls.everything()
            elif self.may_write():
                # Unsettled objects are tried again; settled ones get their usage refreshed.
                self.resources.everything()
                for name, esl in list(self.esls.cache.items()):
                    if not self.esls.settled(esl):
                        self.esls.queue(name)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.resync_seconds):
                    await self._kick.wait()
            self._kick.clear()

    # ---- PolicyStore ---------------------------------------------------------------------

    async def set_resource(
        self, name: str, spec: ResourceSpec, resource_version: str | None = None
    ) -> SetResourceResult:
        return await self.resources.put(name, spec, resource_version)

    async def delete_resource(
        self, name: str, force: bool, resource_version: str | None = None
    ) -> DeleteResourceResult:
        return await self.resources.remove(name, force, resource_version)

    async def create_esl(self, kind: str, body: Any) -> Applied:
        return await self.esls.create(kind, body)

    async def step_esl(self, iid: str, backlog: Mapping[str, int] | None) -> Applied:
        applied = await asyncio.to_thread(self.instances.step, iid, backlog)
        return await self.esls.after(applied)

    async def signal_esl(self, iid: str, key: str) -> Applied:
        applied = await asyncio.to_thread(self.instances.signal, iid, key)
        return await self.esls.after(applied)

    async def delete_esl(self, iid: str) -> Applied:
        return await self.esls.delete(iid)
