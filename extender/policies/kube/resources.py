"""The EphemeralResource reconciler, and the writes PUT/DELETE /v1/resources make of them.

An object's spec is set_resource's body. Reconciling applies it to the ledger (in a worker
thread: O(nodes)), waits for the write-back to put it on the nodes, and writes the status:
per node capacity / allocated / available, and the conditions Applied (the spec is in the
ledger, or why not: UnknownNode, NoMatch, Conflict...), Durable (on every node it targets)
and Conflict. A status whose usage alone moved is rewritten at the resync (every
policy_resync_seconds), not at each event: its own write comes back as an event, and while
pods are being placed its usage has always moved by then, so each write called for the next
(a status of 1,000 nodes, one of the API server's costliest writes, a few times a second).
An object is settled when its status observed its generation with Durable True; a new
leader re-applies every object that is not, so a change is never left on half its nodes.
Deleting an object is finished by the finalizer: the resource leaves the ledger (forced: its
holders keep running) and the nodes, then the finalizer is removed.

Objects an ESL owns (ownerReferences, controller) are its instance's to apply: here they are
only given a status. Resources found on the nodes with no object (set before policies were
objects) are adopted at the leader's first pass. The façade's `put` and `remove` write the
object and reconcile it at once, answering as the in-memory store does
(extender.policies.store.MemoryStore). Built by extender.policies.kube.objectstore; runs on
the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import msgspec

from extender.core import names
from extender.core.errors import Conflict, CoreError, NotFound, Unavailable
from extender.core.ledger import Ledger
from extender.kube.client import ApiError, KubeAPI, merge_patch
from extender.metrics import Metrics
from extender.policies import api as policy
from extender.policies.api import DeleteResourceResult, ResourceSpec, SetResourceResult
from extender.policies.kube import objects as o
from extender.policies.kube.loop import WRITE_SECONDS, Reconciler
from extender.policies.store import WaitDurable

log = logging.getLogger(__name__)


def _check_exists(cur: o.ResourceObject | None, name: str, resource_version: str | None) -> None:
    """A client's precondition on an object there is none of: a clear 409, nothing done."""
    if resource_version is not None and cur is None:
        raise Conflict(
            f"resource {name} has no EphemeralResource object (resourceVersion "
            f"{resource_version} was asked): it was deleted meanwhile, or not made yet; "
            "nothing was changed: read it and retry",
            "resourceVersion",
        )


def unavailable(e: ApiError, what: str) -> Unavailable:
    if e.status == 0:
        # Unanswered: a paused API server may still take the write when it resumes, and
        # then the leader applies it to every node it targets.
        return Unavailable(
            f"{what}: the API server did not answer ({e}); the change is not confirmed: if "
            "it was taken it is applied on every node it targets, never on some: read it "
            "back or retry"
        )
    return Unavailable(f"{what}: the API server refused it ({e}); nothing was changed")


class Resources(Reconciler[o.ResourceObject]):
    KIND = o.ResourceObject
    PLURAL = "ephemeralresources"

    def __init__(
        self,
        api: KubeAPI,
        ledger: Ledger,
        domain: str,
        metrics: Metrics,
        wait: WaitDurable,
        may_write: Callable[[], bool],
    ) -> None:
        super().__init__(api, o.group_path(domain, self.PLURAL), metrics, may_write)
        self.ledger = ledger
        self.domain = domain
        self.finalizer = o.finalizer(domain)
        self._wait = wait
        self._status_written: dict[str, bytes] = {}
        self._heads: dict[str, bytes] = {}  # name -> its written status but the usage
        self._usage_due: set[str] = set()  # settled objects whose usage may be rewritten now
        # Settled objects to apply again all the same: their node was recreated.
        self._reapply: set[str] = set()

    # ---- reconciling ---------------------------------------------------------------------

    def settled(self, obj: o.ResourceObject) -> bool:
        gen = obj.metadata.generation
        return obj.status.observed_generation == gen and o.condition_true(
            obj.status.conditions, "Durable", gen
        )

    async def reconcile(self, name: str) -> None:
        obj = self.cache.get(name)
        if obj is None:
            self._status_written.pop(name, None)
            self._heads.pop(name, None)
            self._usage_due.discard(name)
            return
        if o.esl_owner(obj) is not None:
            await self.refresh(obj)
            return
        if obj.metadata.deletion_timestamp is not None:
            await self._finalize(obj)
            return
        if self.finalizer not in obj.metadata.finalizers:
            obj = await self.patch(
                obj, {"metadata": {"finalizers": [*obj.metadata.finalizers, self.finalizer]}}
            )
        if self.settled(obj) and name not in self._reapply:
            await self.refresh(obj)
            return
        self._reapply.discard(name)
        await self._apply(obj)

    def everything(self) -> None:
        """Queue every object, each one's usage due for a rewrite (the resync, a new
        leader)."""
        self._usage_due.update(self.cache)
        super().everything()

    def node_added(self, node: str) -> None:
        """A node appeared (new, or recreated under its old name, which the ledger forgot
        with the old one): the objects that name it are applied to it again."""
        for name, obj in self.cache.items():
            if obj.spec.node == node and o.esl_owner(obj) is None:
                self._reapply.add(name)
                self.queue(name)

    async def _apply(self, obj: o.ResourceObject, answering: bool = False) -> SetResourceResult:
        """Apply the object's spec and write its status. `answering` (the façade, a caller
        waiting): the status write is bounded like the object's, and one that fails is left
        to the reconcile loop (the object is not settled without it), as the answer depends
        on the ledger and the nodes, not on the status: a paused API server held such a call
        for the client's 30 s and then answered 500 for a change it had applied."""
        name, gen = obj.metadata.name, obj.metadata.generation
        try:
            spec = o.resource_spec(obj)
            full, capacity, version = await asyncio.to_thread(
                policy.set_resource, self.ledger, self.domain, name, spec
            )
        except CoreError as e:
            reason = type(e).__name__
            await self._status(
                obj,
                {
                    "Applied": (False, reason, str(e)),
                    "Durable": (False, "NotApplied", "the spec could not be applied"),
                    "Conflict": (isinstance(e, Conflict), reason, str(e)),
                },
                answering,
            )
            raise
        durable = await self._wait(version, list(capacity))
        await self._status(obj, _applied(durable, len(capacity)), answering)
        log.info(
            "ephemeral resource applied",
            extra={"resource": full, "generation": gen, "nodes": len(capacity), "durable": durable},
        )
        return SetResourceResult(resource=full, nodes=capacity, version=version, durable=durable)

    async def _finalize(self, obj: o.ResourceObject | None, name: str = "") -> DeleteResourceResult:
        """Remove the resource from the ledger and the nodes; then the finalizer."""
        name = obj.metadata.name if obj is not None else name
        full = names.full_name(self.domain, name)
        try:
            _, nodes, version = await asyncio.to_thread(
                policy.delete_resource, self.ledger, self.domain, name, True
            )
            durable = await self._wait(version, nodes)
        except NotFound:
            nodes, durable = [], True
        if durable and obj is not None and self.finalizer in obj.metadata.finalizers:
            rest = [f for f in obj.metadata.finalizers if f != self.finalizer]
            await self.patch(obj, {"metadata": {"finalizers": rest}}, gone_ok=True)
        return DeleteResourceResult(resource=full, removed_from=nodes, durable=durable)

    async def refresh(self, obj: o.ResourceObject) -> None:
        """Rewrite the status when its conditions changed, or its usage (allocations change
        with every bind) when a resync made it due."""
        conds = obj.status.conditions
        if not conds:
            owner = o.esl_owner(obj)
            new = {
                "Applied": (True, "ESL", f"set by ESL {owner}"),
                "Durable": (True, "ESL", f"ESL {owner}'s status says whether it is durable"),
                "Conflict": (False, "None", ""),
            }
        else:
            new = {c.type: (c.status == "True", c.reason, c.message) for c in conds}
        await self._write_status(obj, new, usage=obj.metadata.name in self._usage_due)

    # ---- writes --------------------------------------------------------------------------

    async def _status(
        self, obj: o.ResourceObject, conds: dict[str, tuple[bool, str, str]], answering: bool
    ) -> None:
        if not answering:
            await self._write_status(obj, conds)
            return
        try:
            await self._write_status(obj, conds, timeout=WRITE_SECONDS)
        except ApiError as e:
            log.warning(
                "a status was not written; the reconcile loop writes it",
                extra={"resource": obj.metadata.name, "error": str(e)},
            )
            self.queue(obj.metadata.name)

    async def _write_status(
        self,
        obj: o.ResourceObject,
        conds: dict[str, tuple[bool, str, str]],
        usage: bool = True,
        timeout: float | None = None,
    ) -> None:
        """Write the status if it changed; with `usage` False, only if more than its usage
        (per node and in all) did."""
        name, gen = obj.metadata.name, obj.metadata.generation
        conditions = o.conditions(obj.status.conditions, gen, conds)
        kept = [(c["type"], c["status"], c["reason"]) for c in conditions]
        head = msgspec.json.encode([gen, kept])
        if not usage and self._heads.get(name) == head:
            return  # at the next resync
        full = names.full_name(self.domain, name)
        per_node = await asyncio.to_thread(o.usage, self.ledger, full)
        status = o.resource_status(gen, per_node, conditions)
        fingerprint = head + msgspec.json.encode(status)
        if self._status_written.get(name) != fingerprint:
            await self.put_status(name, status, timeout)
            self._status_written[name], self._heads[name] = fingerprint, head
        self._usage_due.discard(name)

    # ---- adoption ------------------------------------------------------------------------

    async def adopt(self, claimed: set[str]) -> int:
        """Give every resource on the nodes that has no object, and that no ESL claims, an
        object saying what it is; returns how many."""
        prefix = self.domain + "/"
        found = await asyncio.to_thread(_resources, self.ledger, prefix)
        adopted = 0
        for short, caps in sorted(found.items()):
            if short in self.cache or short in claimed:
                continue
            try:
                o.check_object_name(short)
            except CoreError:
                log.warning(
                    "resource left unadopted: its name is no object name",
                    extra={"resource": prefix + short},
                )
                continue
            async with self.locks.hold(short):
                if short in self.cache:
                    continue
                spec = _described(caps, len(self.ledger.node_names()), self.domain)
                body = o.resource_object(self.domain, short, spec)
                body["metadata"]["annotations"] = {f"{self.domain}/adopted": "from the nodes"}
                try:
                    raw = await self.api.request("POST", self.path, body=msgspec.json.encode(body))
                except ApiError as e:
                    if e.status == 409:
                        continue  # someone made it meanwhile: the watch brings it
                    raise
                obj = self.decode.decode(raw)
                self.remember(obj)
                await self._write_status(obj, _applied(True, len(caps), "Adopted"))
                adopted += 1
        if adopted:
            log.info("resources found on the nodes adopted as objects", extra={"count": adopted})
        return adopted

    # ---- the façade: PUT and DELETE /v1/resources/{name} ------------------------------------

    async def put(
        self, name: str, spec: ResourceSpec, resource_version: str | None = None
    ) -> SetResourceResult:
        """Write the object and apply it. With `resource_version` (the caller's precondition,
        as it read the object) the write is based on that version rather than on the one
        this replica read: the API server refuses it (409) if another writer came between."""
        names.check_short_name(name)
        o.check_object_name(name)
        async with self.locks.hold(name):
            cur = self.cache.get(name)
            self._writable(cur, name)
            _check_exists(cur, name, resource_version)
            based_on = resource_version or (cur.metadata.resource_version if cur else "")
            # Refusals the ledger can tell now are answered before anything is written.
            await asyncio.to_thread(policy.check_resource, self.ledger, self.domain, name, spec)
            try:
                if cur is None:
                    body = o.resource_object(self.domain, name, spec)
                    raw = await self.api.request(
                        "POST", self.path, body=msgspec.json.encode(body), timeout=WRITE_SECONDS
                    )
                else:
                    patch = {
                        # The precondition: the API server answers 409 if the object moved
                        # on since (another writer: kubectl, another replica, a client's
                        # precondition read before another's write).
                        "metadata": {"resourceVersion": based_on},
                        "spec": o.spec_body(spec),
                    }
                    raw_patch, ctype = merge_patch(patch)
                    raw = await self.api.request(
                        "PATCH",
                        f"{self.path}/{name}",
                        body=raw_patch,
                        content_type=ctype,
                        timeout=WRITE_SECONDS,
                    )
            except ApiError as e:
                raise self._refused(e, name, based_on) from None
            obj = self.decode.decode(raw)
            self.remember(obj)
            try:
                return await self._apply(obj, answering=True)
            except CoreError:
                await self._undo(obj, cur)
                raise

    async def remove(
        self, name: str, force: bool, resource_version: str | None = None
    ) -> DeleteResourceResult:
        """Delete the object and remove the resource. With `resource_version`, the object is
        deleted only at that version (the API server's precondition, as for put)."""
        names.check_short_name(name)
        async with self.locks.hold(name):
            cur = self.cache.get(name)
            _check_exists(cur, name, resource_version)
            if cur is None:
                # Not an object (a name no object can have, or one deleted meanwhile): the
                # ledger alone, as the in-memory store does.
                full, nodes, version = await asyncio.to_thread(
                    policy.delete_resource, self.ledger, self.domain, name, force
                )
                durable = await self._wait(version, nodes)
                return DeleteResourceResult(resource=full, removed_from=nodes, durable=durable)
            self._writable(cur, name, deleting_ok=True)
            if not force:
                await asyncio.to_thread(policy.check_unheld, self.ledger, self.domain, name)
            based_on = resource_version or cur.metadata.resource_version
            try:
                raw = await self.api.request(
                    "DELETE",
                    f"{self.path}/{name}",
                    body=msgspec.json.encode({"preconditions": {"resourceVersion": based_on}}),
                )
            except ApiError as e:
                if e.status != 404:
                    raise self._refused(e, name, based_on) from None
                raw = b""
            obj = _decoded(self.decode, raw)
            if obj is not None and obj.metadata.deletion_timestamp is not None:
                self.remember(obj)
            else:
                obj = None  # gone at once (it had no finalizer)
            result = await self._finalize(obj, name)
            if not result.removed_from and not result.durable:
                raise NotFound(f"resource {result.resource} not found", "name")
            return result

    def _writable(self, cur: o.ResourceObject | None, name: str, deleting_ok: bool = False) -> None:
        if cur is None:
            return
        owner = o.esl_owner(cur)
        if owner is not None:
            raise Conflict(
                f"resource {name} belongs to ESL {owner}: change it through the ESL", "name"
            )
        if cur.metadata.deletion_timestamp is not None and not deleting_ok:
            raise Conflict(f"resource {name} is being deleted; retry once it is gone", "name")

    def _refused(self, e: ApiError, name: str, based_on: str) -> CoreError:
        if e.status == 409:
            what = (
                f"its EphemeralResource object moved on from resourceVersion {based_on}, "
                "which this write was based on"
                if based_on
                else "its EphemeralResource object was created meanwhile"
            )
            return Conflict(
                f"resource {name} was changed by another writer meanwhile ({what}; the API "
                f"server: {e.message}); nothing was changed: read it and retry",
                "name",
            )
        if e.status == 422:
            return CoreError(f"the API server refused resource {name}: {e}", "name")
        return unavailable(e, f"resource {name}")

    async def _undo(self, obj: o.ResourceObject, before: o.ResourceObject | None) -> None:
        """A write whose spec the ledger refused after all (a race with another change):
        put the object back as it was, so nothing is left half-applied."""
        obj = self.cache.get(obj.metadata.name, obj)  # its refused status moved it on
        try:
            if before is None:
                await self.patch(obj, {"metadata": {"finalizers": []}}, gone_ok=True)
                await self.api.request("DELETE", f"{self.path}/{obj.metadata.name}")
            else:
                await self.patch(obj, {"spec": msgspec.to_builtins(before.spec)})
        except ApiError as e:
            log.warning(
                "a refused write could not be undone; its status says why",
                extra={"resource": obj.metadata.name, "error": str(e)},
            )


def _applied(
    durable: bool, nodes: int, reason: str = "Applied"
) -> dict[str, tuple[bool, str, str]]:
    return {
        "Applied": (True, reason, f"set on {nodes} node(s)"),
        "Durable": (
            durable,
            "OnNodes" if durable else "Writing",
            "every node carries it" if durable else "the write-back is still writing it",
        ),
        "Conflict": (False, "None", ""),
    }


def _resources(ledger: Ledger, prefix: str) -> dict[str, dict[str, int]]:
    found: dict[str, dict[str, int]] = {}
    for node, view in ledger.snapshot().nodes.items():
        for r, cap in view.ephemeral.items():
            if r.startswith(prefix):
                found.setdefault(r[len(prefix) :], {})[node] = cap
    return found


def _described(caps: dict[str, int], all_nodes: int, domain: str) -> ResourceSpec:
    """The spec an adopted resource gets: its node, or every node; otherwise its largest
    capacity on no target (the status lists where it is)."""
    top = max(caps.values())
    if len(caps) == 1:
        return ResourceSpec(capacity=top, node=next(iter(caps)))
    if len(caps) == all_nodes and len(set(caps.values())) == 1:
        return ResourceSpec(capacity=top)
    return ResourceSpec(capacity=top, node_selector={f"{domain}/adopted-irregular": "true"})


def _decoded(
    decoder: msgspec.json.Decoder[o.ResourceObject], raw: bytes
) -> o.ResourceObject | None:
    if not raw:
        return None
    try:
        obj = decoder.decode(raw)
    except msgspec.DecodeError:
        return None
    return obj if obj.metadata.name else None  # a Status: deleted at once
