"""The ESL reconciler, and the writes /v1/esl makes of ESL objects.

An ESL object's spec is what POST /v1/esl takes: the kind and its parameters. Reconciling
runs the instance in the service's registry (extender.esl.registry.Instances): a new object
is created and applied; one whose status holds a state (a previous leader ran it) resumes
from it, its resources found where the nodes say they are. The status gives the instance's
resources, what its pods must request, its steps, its state, and the conditions Ready,
NoRoom and Unsatisfiable with the ESL's own message; it is rewritten whenever the instance
changes (its steps included: the registry tells `changed`).

Every resource an instance sets is first recorded as an EphemeralResource object it owns
(ownerReferences, controller), before the resource exists: a new leader then knows every
resource an instance may have made, and removes those the resumed instance does not hold
(no resource is duplicated or left behind). Deleting an ESL object runs its teardown under
the finalizer. Built by extender.policies.kube.objectstore; runs on the loop, ESL calls in
worker threads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import msgspec

from extender.core.errors import Conflict, CoreError
from extender.esl.backends import LedgerBackend
from extender.esl.base import Dynamic
from extender.esl.errors import (
    ESLError,
    InstanceExists,
    InstanceNotFound,
    NoRoom,
    TooMany,
    Unsatisfiable,
)
from extender.esl.registry import Applied, Instance, Instances, build
from extender.kube.client import ApiError, KubeAPI
from extender.metrics import Metrics
from extender.policies.api import ResourceSpec
from extender.policies.kube import objects as o
from extender.policies.kube.loop import WRITE_SECONDS, Reconciler
from extender.policies.kube.resources import Resources, unavailable

log = logging.getLogger(__name__)

# Makes an instance's backend: (claim, release) hooks in, a LedgerBackend out.
BackendFactory = Callable[
    [Callable[[str, ResourceSpec], None], Callable[[str], None]], LedgerBackend
]
_CALL_SECONDS = 30.0


class ESLs(Reconciler[o.ESLObject]):
    KIND = o.ESLObject
    PLURAL = "esls"

    def __init__(
        self,
        api: KubeAPI,
        domain: str,
        metrics: Metrics,
        instances: Instances,
        resources: Resources,
        backend: BackendFactory,
        may_write: Callable[[], bool],
    ) -> None:
        super().__init__(api, o.group_path(domain, self.PLURAL), metrics, may_write)
        self.domain = domain
        self.instances = instances
        self.resources = resources
        self.finalizer = o.finalizer(domain)
        self._backend = backend
        self._loop: asyncio.AbstractEventLoop | None = None
        instances.on_change = self._changed

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()

    def settled(self, obj: o.ESLObject) -> bool:
        if obj.metadata.deletion_timestamp is not None:
            return False
        return self._running(obj) is not None

    def _running(self, obj: o.ESLObject) -> Instance | None:
        try:
            inst = self.instances.get(f"{obj.spec.kind}-{obj.metadata.name}")
        except InstanceNotFound:
            return None
        return inst

    # ---- reconciling ---------------------------------------------------------------------

    async def reconcile(self, name: str) -> None:
        obj = self.cache.get(name)
        if obj is None:
            return
        if obj.metadata.deletion_timestamp is not None:
            await self._teardown(obj)
            return
        if self.finalizer not in obj.metadata.finalizers:
            obj = await self.patch(
                obj, {"metadata": {"finalizers": [*obj.metadata.finalizers, self.finalizer]}}
            )
        if self._running(obj) is None:
            await self._start(obj)

    async def _start(self, obj: o.ESLObject, answering: bool = False) -> Applied:
        """Create the instance, or resume it from the status a previous leader wrote. While
        `answering` a caller, its status writes are bounded (_status)."""
        state = obj.status.state
        params = obj.spec.params
        if isinstance(params, dict) and "name" not in params:
            params = {**params, "name": obj.metadata.name}  # the CRD makes it optional
        try:
            applied = await asyncio.to_thread(
                self.instances.create,
                obj.spec.kind,
                params,
                self._backend_for(obj),
                state,
            )
        except (ESLError, CoreError) as e:
            await self._status(obj, None, answering, _refused(e))
            raise
        if state is not None:
            await self._drop_strays(obj, applied.instance)
            log.info("ESL resumed", extra={"esl": applied.instance.id})
        await self._status(obj, applied.instance, answering)
        return applied

    async def _drop_strays(self, obj: o.ESLObject, inst: Instance) -> None:
        """Resources it claimed that the resumed instance does not hold: a previous leader
        made them between two status writes. Removed, so none is duplicated."""
        held = {r.removeprefix(self.domain + "/") for r in inst.esl.resources()}
        for short in sorted(self._owned(obj.metadata.name) - held):
            await asyncio.to_thread(inst.backend.delete_resource, short)
            await self._delete_owned(short)

    async def _teardown(self, obj: o.ESLObject) -> Applied | None:
        inst = self._running(obj)
        if inst is None:
            # Not running here (it failed to start, or no leader resumed it yet): remove
            # exactly the resources it claimed.
            backend = self._backend_for(obj)
            for short in sorted(self._owned(obj.metadata.name)):
                await asyncio.to_thread(backend.delete_resource, short)
            if not backend.durable:
                return None  # retried at the next resync
            applied = None
        else:
            applied = await asyncio.to_thread(self.instances.delete, inst.id)
            if not applied.durable:
                return applied  # retried at the next resync
        for short in sorted(self._owned(obj.metadata.name)):
            await self._delete_owned(short)
        rest = [f for f in obj.metadata.finalizers if f != self.finalizer]
        await self.patch(obj, {"metadata": {"finalizers": rest}}, gone_ok=True)
        return applied

    # ---- owned resource objects ----------------------------------------------------------

    def _owned(self, esl: str) -> set[str]:
        return {n for n, r in self.resources.cache.items() if o.esl_owner(r) == esl}

    def _backend_for(self, obj: o.ESLObject) -> LedgerBackend:
        def claim(short: str, spec: ResourceSpec) -> None:
            self._call(self._claim(obj, short, spec))

        def release(short: str) -> None:
            self._call(self._delete_owned(short))

        return self._backend(claim, release)

    def _call(self, coro: Any) -> Any:
        """From an ESL's worker thread: run `coro` on the loop and wait for it there."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(_CALL_SECONDS)

    async def _claim(self, obj: o.ESLObject, short: str, spec: ResourceSpec) -> None:
        have = self.resources.cache.get(short)
        if have is not None:
            if o.esl_owner(have) != obj.metadata.name:
                raise Conflict(
                    f"resource {short} exists and is not ESL {obj.metadata.name}'s: "
                    "delete it or name the ESL otherwise",
                    "name",
                )
            return
        body = o.resource_object(self.domain, short, spec, owner=obj)
        try:
            raw = await self.api.request(
                "POST", self.resources.path, body=msgspec.json.encode(body)
            )
        except ApiError as e:
            if e.status == 409:
                raise Conflict(f"resource {short} exists and is not this ESL's", "name") from None
            raise unavailable(e, f"resource {short} of ESL {obj.metadata.name}") from None
        self.resources.remember(self.resources.decode.decode(raw))

    async def _delete_owned(self, short: str) -> None:
        try:
            await self.api.request("DELETE", f"{self.resources.path}/{short}")
        except ApiError as e:
            if e.status != 404:
                raise
        self.resources.cache.pop(short, None)

    # ---- status --------------------------------------------------------------------------

    def _changed(self, inst: Instance) -> None:
        """The registry's hook (any thread): write the instance's status soon."""
        if self._loop is not None:
            name = inst.esl.params.name
            self._loop.call_soon_threadsafe(self._status_later, name)

    def _status_later(self, name: str) -> None:
        self._loop_task(self._status_of(name))

    def _loop_task(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _status_of(self, name: str) -> None:
        obj = self.cache.get(name)
        if obj is None or not self.may_write():
            return
        inst = self._running(obj)
        if inst is not None:
            await self._status(obj, inst, answering=True)

    async def _status(
        self,
        obj: o.ESLObject,
        inst: Instance | None,
        answering: bool,
        conds: dict[str, tuple[bool, str, str]] | None = None,
    ) -> None:
        """The status written; while answering a caller, within WRITE_SECONDS, and left to
        the reconcile loop if the API server does not take it (the ESL is applied: a paused
        API server must not turn its answer into an error after the client's timeout)."""
        if not answering:
            await self._write_status(obj, inst, conds)
            return
        try:
            await self._write_status(obj, inst, conds, timeout=WRITE_SECONDS)
        except ApiError as e:
            log.warning(
                "ESL status not written; the reconcile loop writes it",
                extra={"esl": obj.metadata.name, "error": str(e)},
            )
            self.queue(obj.metadata.name)

    async def _write_status(
        self,
        obj: o.ESLObject,
        inst: Instance | None,
        conds: dict[str, tuple[bool, str, str]] | None = None,
        timeout: float | None = None,
    ) -> None:
        gen = obj.metadata.generation
        status: dict[str, Any] = {"observedGeneration": gen}
        if inst is not None:
            status.update(await asyncio.to_thread(_instance_status, inst))
            conds = conds or {
                "Ready": (True, "Applied", "its resources exist"),
                "NoRoom": (False, "None", ""),
                "Unsatisfiable": (False, "None", ""),
            }
        else:
            status["state"] = obj.status.state  # a failed resume keeps what it may resume from
        status["conditions"] = o.conditions(obj.status.conditions, gen, conds or {})
        await self.put_status(obj.metadata.name, status, timeout)

    # ---- the façade: /v1/esl ------------------------------------------------------------------

    async def create(self, kind: str, body: Any) -> Applied:
        # Validated before anything is written (InvalidParameters, UnknownKind), no I/O.
        probe = build(kind, body, self._backend(_no_claim, _no_release))
        name = probe.params.name
        async with self.locks.hold(name):
            have = self.cache.get(name)
            if have is not None:
                raise InstanceExists(
                    f"ESL {have.spec.kind}-{name} exists; delete it first or choose another "
                    "name (one ESL object per name)",
                    "name",
                )
            if len(self.instances) >= self.instances.limit:
                raise TooMany(
                    f"the service runs {self.instances.limit} ESL instances, its limit", "kind"
                )
            obj_body = o.esl_object(self.domain, name, kind, body)
            try:
                raw = await self.api.request(
                    "POST", self.path, body=msgspec.json.encode(obj_body), timeout=WRITE_SECONDS
                )
            except ApiError as e:
                if e.status == 409:
                    raise InstanceExists(f"ESL {name} exists", "name") from None
                if e.status == 422:
                    raise CoreError(f"the API server refused ESL {name}: {e}", "name") from None
                raise unavailable(e, f"ESL {name}") from None
            obj = self.decode.decode(raw)
            self.remember(obj)
            try:
                return await self._start(obj, answering=True)
            except (ESLError, CoreError):
                await self._forget(obj)
                raise

    async def _forget(self, obj: o.ESLObject) -> None:
        """An ESL the façade created and could not apply: gone again, as today's create
        leaves nothing behind."""
        obj = self.cache.get(obj.metadata.name, obj)  # its refused status moved it on
        try:
            await self.patch(obj, {"metadata": {"finalizers": []}}, gone_ok=True)
            await self.api.request("DELETE", f"{self.path}/{obj.metadata.name}")
        except ApiError as e:
            if e.status != 404:
                log.warning("a refused ESL object stays", extra={"esl": obj.metadata.name})
        for short in sorted(self._owned(obj.metadata.name)):
            await self._delete_owned(short)
        self.cache.pop(obj.metadata.name, None)

    async def after(self, applied: Applied) -> Applied:
        """A step or signal: its status written before the reply."""
        await self._status_of(applied.instance.esl.params.name)
        return applied

    async def delete(self, iid: str) -> Applied:
        inst = self.instances.get(iid)
        name = inst.esl.params.name
        async with self.locks.hold(name):
            obj = self.cache.get(name)
            if obj is None:
                return await asyncio.to_thread(self.instances.delete, iid)
            try:
                raw = await self.api.request("DELETE", f"{self.path}/{name}")
            except ApiError as e:
                if e.status != 404:
                    raise unavailable(e, f"ESL {name}") from None
            else:
                deleted = self.decode.decode(raw)
                if deleted.metadata.name:
                    self.remember(deleted)
                    obj = deleted
            applied = await self._teardown(obj)
            if applied is None:
                raise InstanceNotFound(f"no ESL instance {iid[:64]!r}", "id")
            return applied


def _instance_status(inst: Instance) -> dict[str, Any]:
    esl = inst.esl
    with inst.lock:
        return {
            "id": inst.id,
            "dynamic": isinstance(esl, Dynamic),
            "steps": inst.steps,
            "resources": esl.resources(),
            "requests": {
                k: esl.requests_for(k).model_dump(mode="json") for k in esl.request_keys()
            },
            "state": esl.state(),
        }


def _refused(e: Exception) -> dict[str, tuple[bool, str, str]]:
    reason = type(e).__name__
    return {
        "Ready": (False, reason, str(e)),
        "NoRoom": (isinstance(e, NoRoom), reason, str(e) if isinstance(e, NoRoom) else ""),
        "Unsatisfiable": (
            isinstance(e, Unsatisfiable),
            reason,
            str(e) if isinstance(e, Unsatisfiable) else "",
        ),
    }


def _no_claim(short: str, spec: ResourceSpec) -> None:
    raise AssertionError("a probe applies nothing")


def _no_release(short: str) -> None:
    raise AssertionError("a probe removes nothing")
