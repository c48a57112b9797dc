"""The dra mode's write-back: ephemeral resources published as DRA devices in ResourceSlices.

Kubernetes 1.37 backs extended resources with DRA (KEP-5004, GA): a DeviceClass whose
`extendedResourceName` is `<domain>/<name>` lets an unmodified pod request `<domain>/<name>:
1`, and kube-scheduler's DynamicResources plugin allocates one device of that class for it
(a ResourceClaim it creates for the pod). Here each node's capacity of each resource
(NodeView.ephemeral, as the Node status write-back writes it) becomes that many devices, `u0`,
`u1`, ..., under this service's driver, device `u<k>` in pool `<node>/<name>/<k // 128>`, each
pool one slice (128 devices is the API's limit per slice: extender.dra.devices). One slice per
pool because kube-scheduler skips a pool whose newest generation is not complete: a pool of
several slices would be unusable from the first slice rewritten to the last. A change rewrites
only the pools it changes, and a device never moves between pools. A device a claim holds is
kept published, and a free one already published is kept rather than swapped for a new name
(kube-scheduler may have given a released device to a pod whose claim is not seen yet). A
decrease that raced with kube-scheduler's allocations leaves claims holding more than the
capacity: then only their devices are published, each with a NoSchedule DRA device taint
(`publication`), so that none is allocated again, one a pod releases included, until the node
is back within its capacity; the slices carry the capacity as a label meanwhile, for a new
leader to adopt. Publishing what is held untainted instead let kube-scheduler give each
released device to a waiting pod before the next publish took it away; unpublishing each as it
is released cannot close that, since kube-scheduler sees the release on its own claim watch
first.

Three informers feed it: our slices (the durable truth, extender.dra.pools: adopted by the
ledger while it is built and on a replica that does not lead, compared with the ledger
otherwise), the ResourceClaims (the allocations, held in the ledger: extender.dra.claims), and
the DeviceClasses (extender.dra.classes). Another's class that maps a name of the domain, or a
slice of our driver we did not write, makes `guard` refuse that resource: never adopted, never
overwritten. The cluster view counts no pod's request of the domain in this mode, so nothing
is counted twice. `guard` is the ledger's check before any capacity is set: above what
`dra_max_slices` pools can hold is refused with 422 naming the limit, so nothing is published
halfway.

Coalescing, retries, durability and leadership are the engine's
(extender.writeback.nodewriter). Created by extender.cluster.build in mode dra.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import msgspec

from extender.core.errors import Conflict, InvalidValue
from extender.dra.args import DraArgs
from extender.dra.claims import ClaimHoldings, Held
from extender.dra.classes import DeviceClasses
from extender.dra.devices import (
    MAX_DEVICES,
    Want,
    group_name,
    pool_name,
    publication,
    slice_name,
)
from extender.dra.objects import (
    GROUP,
    MANAGED_BY,
    DeviceClass,
    ResourceClaim,
    ResourceSlice,
    SliceList,
    capacity_label,
    delete,
    name_of,
    ours,
    resource_label,
    taint_key,
    uid_of,
)
from extender.dra.pools import Pools, seen_of
from extender.kube.client import ApiError
from extender.kube.handle import Handle
from extender.kube.informer import Handler, Informer
from extender.metrics import Metrics
from extender.writeback.args import WriteBackArgs
from extender.writeback.nodewriter import NodeWriter

log = logging.getLogger(__name__)
T = TypeVar("T", ResourceSlice, ResourceClaim, DeviceClass)

_CONFLICT_RETRIES = 3


class SlicePublisher(NodeWriter):
    def __init__(
        self,
        handle: Handle,
        args: DraArgs,
        writeback: WriteBackArgs,
    ) -> None:
        ledger = handle.ledger
        super().__init__(ledger, writeback, handle.metrics, handle.may_write)
        self._api = api = handle.api
        self._dra = args
        self.driver = args.driver_name(handle.domain)
        self.max_capacity = args.max_slices * MAX_DEVICES
        self._prefix = ledger.prefix
        self._domain = handle.domain
        metrics = handle.metrics
        self._building = True
        self._pools = Pools(self._domain)
        self._holdings = ClaimHoldings(ledger, self._prefix, self.driver, self._pools)
        self._classes = DeviceClasses(
            api, self.driver, self._domain, self._prefix, self._check_leading
        )
        self._taints = True  # False once the API server dropped our devices' taints
        self.slices = self._informer(
            "resourceslices",
            ResourceSlice,
            self._slice,
            self._slices_listed,
            name_of,
            metrics,
            selector=f"spec.driver={self.driver}",  # ours, and others' we refuse
        )
        self.claims = self._informer(
            "resourceclaims", ResourceClaim, self._claim, self._claims_listed, uid_of, metrics
        )
        self.classes = self._informer(
            "deviceclasses",
            DeviceClass,
            self._classes.observe,
            self._classes.listed,
            name_of,
            metrics,
        )

    def _informer(
        self,
        kind: str,
        cls: type[T],
        event: Callable[[str, T], None],
        listed: Callable[[set[str]], None],
        key: Callable[[T], str],
        metrics: Metrics,
        selector: str | None = None,
    ) -> Informer[T]:
        handler = Handler(event, listed, key)
        return Informer(
            self._api, kind, f"{GROUP}/{kind}", cls, handler, metrics, field_selector=selector
        )

    def informers(self) -> Sequence[Informer[Any]]:
        return (self.classes, self.slices, self.claims)

    async def sync(self) -> None:
        """List classes, slices and claims: the slices' capacities and the claims' holdings go
        into the ledger (the nodes are in it already: the cluster view synced first), the
        slices first so that every claimed device's resource is known."""
        self._building = True
        for informer in self.informers():
            await informer.sync()
        self._building = False

    # ---- the ledger's guard ------------------------------------------------------------------

    def guard(self, resource: str, capacity: Mapping[str, int]) -> None:
        """Refuse a capacity this mode cannot publish, before anything is changed."""
        over = sorted((n, c) for n, c in capacity.items() if c > self.max_capacity)
        if over:
            node, cap = over[0]
            raise InvalidValue(
                f"capacity {cap} of {resource} on node {node} is above {self.max_capacity}, "
                f"the most mode dra publishes per node: {self._dra.max_slices} "
                f"ResourceSlices (dra_max_slices) of {MAX_DEVICES} devices; nothing was changed",
                "capacity",
            )
        theirs = self._classes.mapped_by_another(resource)
        if theirs is not None:
            raise Conflict(
                f"DeviceClass {theirs} (not written by escher-extender) already maps "
                f"{resource}: pods asking for it would get its devices, so none are "
                "published under that name; delete that class or choose another name",
                "name",
            )
        short = resource[len(self._prefix) :]
        for node in capacity:
            group = group_name(node, short)
            other = self._pools.foreign_in(group)
            if other is not None:
                raise Conflict(
                    f"ResourceSlice {other[1]} of driver {self.driver} (not written by this "
                    f"service) already publishes pool {other[0]}; nothing was changed",
                    "name",
                )
            pool = pool_name(node, short, self._dra.max_slices - 1)
            if len(pool) > 253:
                raise InvalidValue(
                    f"pool name {pool[:64]}... is longer than 253 characters: node and "
                    "resource names too long for mode dra",
                    "name",
                )

    # ---- informer events -----------------------------------------------------------------------

    def _slice(self, kind: str, s: ResourceSlice) -> None:
        meta, spec = s.metadata, s.spec
        pool = spec.pool.name
        if not ours(meta):
            if kind == "DELETED":
                self._pools.foreign.pop(pool, None)
            else:
                self._pools.foreign[pool] = meta.name
                log.warning(
                    "ResourceSlice of our driver not written by us: left alone, its pool refused",
                    extra={"slice": meta.name, "pool": pool},
                )
            return
        resource = meta.labels.get(resource_label(self._domain), "")
        node = spec.node_name or ""
        if not node or not resource:
            return
        self._holdings.learn(resource)
        if kind == "DELETED":
            self._pools.forget_slice(pool, meta.name)
        else:
            self._pools.put(node, self._prefix + resource, s)
        self._compare(node)

    def _slices_listed(self, names: set[str]) -> None:
        for pool, seen in list(self._pools.by_name.items()):
            for name in list(seen.slices):
                if name not in names:
                    del seen.slices[name]
            if not seen.slices:
                self._pools.drop(pool)
                self._compare(seen.node)

    def _compare(self, node: str) -> None:
        """The cluster changed for `node`: mirror it while building or following, else
        re-assert the ledger where it differs."""
        shown = self._pools.shown(node)
        if self._building or not self._may_write():
            self._ledger.adopt(node, shown)
            return
        if self._differs(node):
            self.drifted(node)

    def _differs(self, node: str) -> bool:
        """Whether the node's slices are not what the ledger and the claims call for: a
        capacity, or a device a claim holds (one seen while our write that unpublished it
        was in flight: `_held_elsewhere` then still saw the old slice, so it is caught when
        that write's slice comes back), or a taint to put on or take off."""
        view = self._ledger.node(node)
        capacities = dict(view.ephemeral) if view is not None else {}
        have: dict[str, list[str]] = {}
        for pool in self._pools.of(node):
            have.setdefault(self._pools.by_name[pool].resource, []).append(pool)
        for resource in set(capacities) | set(have):
            short = resource[len(self._prefix) :]
            group = group_name(node, short)
            if self._pools.foreign_in(group) is not None:
                continue  # refused by the guard; never written
            wanted = self._wanted(node, short, group, capacities.get(resource, 0))
            if set(wanted) != set(have.get(resource, ())):
                return True
            if any(not self._pools.by_name[p].unchanged(w) for p, w in wanted.items()):
                return True
        return False

    def _wanted(self, node: str, short: str, group: str, count: int) -> dict[str, Want]:
        """Pool name -> what it should publish (`publication`)."""
        held = self._holdings.in_group(group)
        shown = self._pools.devices_shown(node, group)
        wants = publication(count, held, self._taints, shown)
        return {pool_name(node, short, i): w for i, w in wants.items()}

    def _claim(self, kind: str, c: ResourceClaim) -> None:
        old, held = self._holdings.observe(kind, c)
        if held:
            self._held_elsewhere(held)
        self._released(tuple(set(old) - set(held)))

    def _claims_listed(self, uids: set[str]) -> None:
        for held in self._holdings.listed(uids):
            self._released(held)

    def _held_elsewhere(self, held: Held) -> None:
        # kube-scheduler allocated a device a decrease has since unpublished (it allocates in
        # memory, then writes the claim): publish it again at once, so the node never shows
        # fewer devices than its pods hold.
        for pool, device in held:
            seen = self._pools.by_name.get(pool)
            shown = seen.current() if seen is not None else []
            if not any(device in s.devices for s in shown):
                node = seen.node if seen is not None else pool.partition("/")[0]
                if not self._building and self._may_write():
                    self.drifted(node)

    def _released(self, devices: Iterable[tuple[str, str]]) -> None:
        # A device kept only because a claim held it may go now: look at its node again.
        for pool in {p for p, _ in devices}:
            seen = self._pools.by_name.get(pool)
            if seen is not None and not self._building and self._may_write():
                self.drifted(seen.node)

    # ---- NodeWriter ----------------------------------------------------------------------------

    def _last_known(self, node: str) -> Mapping[str, int] | None:
        return self._pools.shown(node) if self._pools.known(node) else None

    def _forget(self, node: str) -> None:
        pass  # a node's pools leave with their slices' delete events

    def _stale(self, node: str) -> None:
        for pool in self._pools.of(node):
            self._pools.by_name[pool].stale = True

    async def _converge(self, node: str) -> bool:
        view = self._ledger.node(node)
        desired = dict(view.ephemeral) if view is not None else {}
        resources = set(desired) | self._pools.resources(node)
        wrote = False
        for resource in sorted(resources):
            wrote |= await self._publish(node, resource, desired.get(resource, 0))
        return wrote

    async def _publish(self, node: str, resource: str, count: int) -> bool:
        short = resource[len(self._prefix) :]
        group = group_name(node, short)
        if self._pools.foreign_in(group) is not None:
            return False  # refused by the guard; never overwritten
        wrote = False
        for _ in range(_CONFLICT_RETRIES + 1):
            if any(self._pools.by_name[p].stale for p in self._pools.of(node)):
                await self._reread(node)
            try:
                return await self._publish_once(node, resource, short, group, count) or wrote
            except ApiError as e:
                if e.status != 409:
                    raise
                wrote = True
                await self._reread(node)
        return wrote

    async def _publish_once(
        self, node: str, resource: str, short: str, group: str, count: int
    ) -> bool:
        """One pass: each pool whose devices differ rewritten (its one slice, the next
        generation), pools no longer wanted deleted. A device stays in pool index // 128, so
        a held device never changes pools, and a change touches only the pools it changes."""
        wanted = self._wanted(node, short, group, count)
        have = [p for p in self._pools.of(node) if self._pools.by_name[p].resource == resource]
        wrote = False
        for pool, want in sorted(wanted.items()):
            seen = self._pools.by_name.get(pool)
            if seen is not None and seen.unchanged(want):
                continue
            await self._classes.ensure(short, resource)
            await self._write_pool(node, short, pool, want)
            wrote = True
        for pool in sorted(set(have) - set(wanted)):
            for name in list(self._pools.by_name[pool].slices):
                self._check_leading()
                await self._delete_slice(pool, name)
            wrote = True
        if have and not wanted and not self._ledger.has_resource(resource):
            await self._classes.delete(short)
        return wrote

    async def _write_pool(self, node: str, short: str, pool: str, want: Want) -> None:
        """The pool's one slice written as its next generation; any other slice of it deleted."""
        seen = self._pools.by_name.get(pool)
        old = seen.slices if seen is not None else {}
        generation = max((x.generation for x in old.values()), default=0) + 1
        name = slice_name(pool)
        body = self._slice_body(name, node, short, pool, generation, want)
        self._check_leading()
        if name in old:  # replaced, as of the version seen: a 409 reads it again
            body["metadata"]["resourceVersion"] = old[name].version
        method, path = ("PUT", f"/{name}") if name in old else ("POST", "")
        reply = await self._api.request(
            method,
            f"{GROUP}/resourceslices{path}",
            body=msgspec.json.encode(body),
            content_type="application/json",
            what=f"writing slice {name}",
        )
        written = msgspec.json.decode(reply, type=ResourceSlice)
        if want.tainted and not seen_of(written, self._domain).tainted:
            # DRADeviceTaints off in the API server: the field is dropped on write.
            self._taints = False
            log.warning(
                "the API server dropped the devices' taints (feature gate DRADeviceTaints "
                "off): devices held above a lowered capacity are published untainted, "
                "and kube-scheduler may give one a pod releases to a waiting pod",
                extra={"slice": name},
            )
        self._slice("MODIFIED", written)
        for other in [x for x in old if x != name]:  # a slice we did not name so
            await self._delete_slice(pool, other)

    def _slice_body(
        self,
        name: str,
        node: str,
        short: str,
        pool: str,
        generation: int,
        want: Want,
    ) -> dict[str, Any]:
        key = taint_key(self._domain)
        taints = [{"key": key, "effect": "NoSchedule"}] if want.tainted else []
        spec: dict[str, Any] = {
            "driver": self.driver,
            "nodeName": node,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": d,
                    "attributes": {"resource": {"string": short}},
                    **({"taints": taints} if taints else {}),
                }
                for d in want.devices
            ],
        }
        if self._dra.skip_node_operations:
            # Nothing to prepare on the node: a unit is a count, not a device to set up.
            spec["skipNodeOperations"] = ["*"]
        labels = {MANAGED_BY[0]: MANAGED_BY[1], resource_label(self._domain): short}
        if want.capacity is not None:
            labels[capacity_label(self._domain)] = str(want.capacity)
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
        }

    async def _delete_slice(self, pool: str, name: str) -> None:
        await delete(self._api, f"{GROUP}/resourceslices/{name}", f"deleting slice {name}")
        self._pools.forget_slice(pool, name)

    async def _reread(self, node: str) -> None:
        """List the node's slices of our driver afresh (after a conflict or a failure)."""
        reply = await self._api.request(
            "GET",
            f"{GROUP}/resourceslices",
            params={"fieldSelector": f"spec.nodeName={node},spec.driver={self.driver}"},
            what=f"listing slices of node {node}",
        )
        page = msgspec.json.decode(reply, type=SliceList)
        for pool in list(self._pools.of(node)):
            self._pools.drop(pool)
        building = self._building
        self._building = False  # a re-read is not an adoption
        try:
            for s in page.items:
                if ours(s.metadata):
                    resource = s.metadata.labels.get(resource_label(self._domain), "")
                    if resource:
                        self._holdings.learn(resource)
                        self._pools.put(node, self._prefix + resource, s)
        finally:
            self._building = building
