"""The dra mode's write-back: ephemeral resources published as DRA devices in ResourceSlices.

Kubernetes 1.37 backs extended resources with DRA (KEP-5004, GA): a DeviceClass whose
`extendedResourceName` is `<domain>/<name>` lets an unmodified pod request `<domain>/<name>:
1`, and kube-scheduler's DynamicResources plugin allocates one device of that class for it
(a ResourceClaim it creates for the pod). Here each node's capacity of each resource
(NodeView.ephemeral, as the Node status write-back writes it) becomes that many devices, `u0`,
`u1`, ..., under this service's driver, device `u<k>` in pool `<node>/<name>/<k // 128>`, each
pool one slice (128 devices is the API's limit per slice). One slice per pool because
kube-scheduler skips a pool whose newest generation is not complete: a pool of several slices
would be unusable from the first slice rewritten to the last. A change rewrites only the pools
it changes, and a device never moves between pools. A device a claim holds is kept published,
and a free one already published is kept rather than swapped for a new name (kube-scheduler
may have given a released device to a pod whose claim is not seen yet). A decrease that raced
with kube-scheduler's allocations leaves claims holding more than the capacity: then only
their devices are published, each with a NoSchedule DRA device taint (`publication`), so that
none is allocated again, one a pod releases included, until the node is back within its
capacity; the slices carry the capacity as a label meanwhile, for a new leader to adopt.
Publishing what is held untainted instead let kube-scheduler give each released device to a
waiting pod before the next publish took it away; unpublishing each as it is released cannot
close that, since kube-scheduler sees the release on its own claim watch first.

Three informers feed it: our slices (the durable truth: adopted by the ledger while it is
built and on a replica that does not lead, compared with the ledger otherwise), the
ResourceClaims, and the DeviceClasses (ours are created when a resource first has capacity
and deleted with its last pool; another's class that maps a name of the domain, or a slice of
our driver we did not write, makes `guard` refuse that resource: never adopted, never
overwritten).

The claims are the allocations. kube-scheduler allocates a device in memory and writes the
claim (PreBind) before it binds the pod, and it counts a device taken for as long as a claim
holds it: so each claim is a holding in the ledger (HolderKind.CLAIM, per node: its devices
of each resource, the resource named by the pool), which is what get_cluster_state shows
allocated and what a decrease is checked against (409 below it). The cluster view counts no
pod's request of the domain in this mode, so nothing is counted twice. They also say which
devices must stay published. `guard` is the ledger's check before any
capacity is set: above what `dra_max_slices` pools can hold is refused with 422 naming the
limit, so nothing is published halfway.

Coalescing, retries, durability and leadership are the engine's
(extender.writeback.nodewriter). Created by extender.cluster.build in mode dra.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
from msgspec import Struct

from extender.core.errors import Conflict, InvalidValue
from extender.core.ledger import HolderKind, Ledger
from extender.core.objects import ObjectMeta
from extender.kube.client import ApiError, KubeAPI
from extender.kube.informer import Handler, Informer
from extender.metrics import Metrics
from extender.settings import Settings
from extender.writeback.nodewriter import NodeWriter

log = logging.getLogger(__name__)
T = TypeVar("T", "ResourceSlice", "ResourceClaim", "DeviceClass")

GROUP = "/apis/resource.k8s.io/v1"
MAX_DEVICES = 128  # resource.k8s.io/v1 ResourceSliceMaxDevices
# resource.k8s.io/v1 ResourceSliceMaxDevicesWithAdvancedFeatures: a slice in which any device
# has taints holds at most 64 devices.
MAX_TAINTED = 64
MANAGED_BY = ("app.kubernetes.io/managed-by", "escher-extender")
_CONFLICT_RETRIES = 3
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


# ---- the objects, as far as they are read -------------------------------------------------


class _Obj(Struct, rename="camel", frozen=True, gc=False):
    """Kubernetes JSON: camelCase keys; unknown keys are skipped."""


class _Taint(_Obj, frozen=True):
    key: str = ""
    effect: str = ""


class _Device(_Obj, frozen=True):
    name: str = ""
    taints: list[_Taint] = []


class _Pool(_Obj, frozen=True):
    name: str = ""
    generation: int = 0
    resource_slice_count: int = 0


class _SliceSpec(_Obj, frozen=True):
    driver: str = ""
    node_name: str | None = None
    pool: _Pool = _Pool()
    devices: list[_Device] = []


class ResourceSlice(_Obj, frozen=True):
    metadata: ObjectMeta = ObjectMeta()
    spec: _SliceSpec = _SliceSpec()


class _Result(_Obj, frozen=True):
    driver: str = ""
    pool: str = ""
    device: str = ""


class _Devices(_Obj, frozen=True):
    results: list[_Result] = []


class _Allocation(_Obj, frozen=True):
    devices: _Devices = _Devices()


class _ClaimStatus(_Obj, frozen=True):
    allocation: _Allocation | None = None


class ResourceClaim(_Obj, frozen=True):
    metadata: ObjectMeta = ObjectMeta()
    status: _ClaimStatus = _ClaimStatus()


class _ClassSpec(_Obj, frozen=True):
    extended_resource_name: str | None = None


class DeviceClass(_Obj, frozen=True):
    metadata: ObjectMeta = ObjectMeta()
    spec: _ClassSpec = _ClassSpec()


# ---- names ----------------------------------------------------------------------------------


def dns_name(short: str) -> str:
    """A resource's name as DNS label characters (DeviceClass and pool names need them):
    itself when it is one, else lower-cased with `_` and `.` as `-` and a hash of the real
    name appended, so two names never meet."""
    if _DNS_LABEL.match(short) and len(short) <= 50:
        return short
    base = re.sub(r"[^a-z0-9-]", "-", short.lower()).strip("-")[:40] or "r"
    return f"{base}-{hashlib.sha256(short.encode()).hexdigest()[:8]}"


def group_name(node: str, short: str) -> str:
    """The pools of one node's resource share this prefix: `<node>/<name>`."""
    return f"{node}/{dns_name(short)}"


def pool_name(node: str, short: str, index: int = 0) -> str:
    """Pool `index` of a node's resource: devices u<128*index> .. u<128*index+127>."""
    return f"{group_name(node, short)}/{index}"


def slice_name(pool: str) -> str:
    """The one slice of a pool (a DNS subdomain, unique per pool)."""
    node, _, rest = pool.partition("/")
    digest = hashlib.sha256(pool.encode()).hexdigest()[:8]
    return f"{node[:180]}-{rest.replace('/', '-')}-{digest}"


def pool_of(device: str) -> int:
    """The pool index a device name belongs in (foreign names: the last possible)."""
    return _index(device)[0] // MAX_DEVICES


def device_names(count: int, allocated: Iterable[str], shown: Iterable[str] = ()) -> list[str]:
    """The devices of a pool of `count` units: every allocated device (kept whatever the
    count), then free devices already published (`shown`), lowest first, then `u<i>` names
    not taken, lowest first, up to `count`; in index order.

    A free device already published is kept rather than swapped for another: a device a pod
    releases may be allocated again by kube-scheduler before its claim reaches us, and
    publishing another name in its place would give kube-scheduler one device more than the
    capacity (seen on the real control plane: a third pod bound where 2 were accepted)."""
    names = set(allocated)
    for d in sorted(set(shown) - names, key=_index):
        if len(names) >= count:
            break
        names.add(d)
    i = 0
    while len(names) < count:
        names.add(f"u{i}")
        i += 1
    return sorted(names, key=_index)


@dataclass(frozen=True)
class Want:
    """What one pool publishes: its devices, whether they carry the over-capacity taint, and
    the group's capacity (a label on the slice) while they do."""

    devices: tuple[str, ...]
    tainted: bool = False
    capacity: int | None = None


def publication(
    count: int, held: Iterable[str], taints: bool = True, shown: Iterable[str] = ()
) -> dict[int, Want]:
    """Pool index -> what it publishes, for a node's resource of capacity `count` of which
    claims hold the devices `held`.

    Within the capacity (held <= count): the held devices and free ones up to `count`
    (those published, `shown`, first: `device_names`), untainted. Above it (a decrease raced
    with kube-scheduler's allocations, or claims were counted late): only the held devices,
    each tainted NoSchedule, so kube-scheduler allocates none of them (the extended-resource
    claims it creates tolerate no taint) and a device a pod releases takes no new pod until
    the node is back within its capacity. A tainted slice holds at most 64 devices (the API's
    limit): a pool holding more keeps its 64 lowest tainted and leaves the rest unpublished
    until released (not allocatable either way). Every slice then carries the capacity,
    which the devices no longer count.
    `taints=False` (an API server that drops them: DRADeviceTaints off) publishes the held
    devices untainted, as before taints were used."""
    held = set(held)
    per: dict[int, list[str]] = {}
    if count and len(held) > count:
        for d in sorted(held, key=_index):
            per.setdefault(pool_of(d), []).append(d)
        if not taints:
            return {i: Want(tuple(ds), False, count) for i, ds in per.items()}
        return {i: Want(tuple(ds[:MAX_TAINTED]), True, count) for i, ds in per.items()}
    if count:
        for d in device_names(count, held, shown):
            per.setdefault(pool_of(d), []).append(d)
    return {i: Want(tuple(ds)) for i, ds in per.items()}


def _index(device: str) -> tuple[int, str]:
    digits = device[1:]
    return (int(digits), "") if device.startswith("u") and digits.isdigit() else (1 << 62, device)


# ---- what the cluster shows ---------------------------------------------------------------


@dataclass
class _Seen:
    """One of our slices as last seen."""

    name: str
    version: str
    generation: int
    count: int  # the pool's resourceSliceCount
    devices: tuple[str, ...]
    tainted: bool = False  # its devices carry the over-capacity taint
    capacity: int | None = None  # the group's capacity, labelled while tainted


@dataclass
class _PoolSeen:
    node: str
    resource: str  # full name
    slices: dict[str, _Seen] = field(default_factory=dict)
    stale: bool = False

    def current(self) -> list[_Seen]:
        """The slices of the newest generation (kube-scheduler ignores older ones)."""
        if not self.slices:
            return []
        top = max(s.generation for s in self.slices.values())
        return [s for s in self.slices.values() if s.generation == top]

    def complete(self) -> list[_Seen]:
        """The newest generation if complete, else nothing (kube-scheduler uses none)."""
        cur = self.current()
        return cur if cur and len(cur) >= cur[0].count else []

    def units(self) -> int:
        """Devices kube-scheduler sees: 0 while the newest generation is incomplete."""
        return sum(len(s.devices) for s in self.complete())

    def capacity(self) -> int | None:
        """The group's capacity a tainted slice carries, if it does."""
        caps = [s.capacity for s in self.complete() if s.capacity is not None]
        return min(caps) if caps else None


class SlicePublisher(NodeWriter):
    def __init__(
        self,
        api: KubeAPI,
        ledger: Ledger,
        settings: Settings,
        metrics: Metrics,
        may_write: Callable[[], bool],
    ) -> None:
        super().__init__(ledger, settings, metrics, may_write)
        self._api = api
        self.driver = settings.dra_driver_name
        self.max_capacity = settings.dra_max_slices * MAX_DEVICES
        self._prefix = ledger.prefix
        self._domain = settings.resource_domain
        self._building = True
        self._pools: dict[str, _PoolSeen] = {}  # pool name -> what the cluster shows
        self._node_pools: dict[str, set[str]] = {}  # node -> its pool names
        self._foreign: dict[str, str] = {}  # pool name -> slice of our driver not ours
        self._claims: dict[str, tuple[tuple[str, str], ...]] = {}  # uid -> (pool, device)
        self._holders: dict[str, tuple[str, ...]] = {}  # claim uid -> its ledger holders
        # A pool names its resource by dns_name: the full names, learnt from our slices.
        self._resources: dict[str, str] = {}
        self._unresolved: set[str] = set()  # claims holding a device of a name not learnt yet
        # Group (node/name) -> device -> claims holding it (device names are unique per group).
        self._allocated: dict[str, dict[str, int]] = {}
        self._classes: dict[str, DeviceClass] = {}  # class name -> class
        self._mapped: dict[str, str] = {}  # extended resource name -> class name (not ours)
        self._taints = True  # False once the API server dropped our devices' taints
        self.slices = self._informer(
            "resourceslices",
            ResourceSlice,
            self._slice,
            self._slices_listed,
            _name,
            metrics,
            selector=f"spec.driver={self.driver}",  # ours, and others' we refuse
        )
        self.claims = self._informer(
            "resourceclaims", ResourceClaim, self._claim, self._claims_listed, _uid, metrics
        )
        self.classes = self._informer(
            "deviceclasses", DeviceClass, self._class, self._classes_listed, _name, metrics
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
                f"the most mode dra publishes per node: {self._settings.dra_max_slices} "
                f"ResourceSlices (dra_max_slices) of {MAX_DEVICES} devices; nothing was changed",
                "capacity",
            )
        theirs = self._mapped.get(resource)
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
            other = self._foreign_in(group)
            if other is not None:
                raise Conflict(
                    f"ResourceSlice {other[1]} of driver {self.driver} (not written by this "
                    f"service) already publishes pool {other[0]}; nothing was changed",
                    "name",
                )
            pool = pool_name(node, short, self._settings.dra_max_slices - 1)
            if len(pool) > 253:
                raise InvalidValue(
                    f"pool name {pool[:64]}... is longer than 253 characters: node and "
                    "resource names too long for mode dra",
                    "name",
                )

    def _foreign_in(self, group: str) -> tuple[str, str] | None:
        """Another writer's (pool, slice) among a group's pool names, if any."""
        for pool, name in self._foreign.items():
            if pool == group or pool.startswith(group + "/"):
                return pool, name
        return None

    # ---- informer events -----------------------------------------------------------------------

    def _slice(self, kind: str, s: ResourceSlice) -> None:
        meta, spec = s.metadata, s.spec
        pool = spec.pool.name
        ours = meta.labels.get(MANAGED_BY[0]) == MANAGED_BY[1]
        if not ours:
            if kind == "DELETED":
                self._foreign.pop(pool, None)
            else:
                self._foreign[pool] = meta.name
                log.warning(
                    "ResourceSlice of our driver not written by us: left alone, its pool refused",
                    extra={"slice": meta.name, "pool": pool},
                )
            return
        resource = meta.labels.get(self._resource_label, "")
        node = spec.node_name or ""
        if not node or not resource:
            return
        self._learn(resource)
        seen = self._pools.get(pool)
        if kind == "DELETED":
            if seen is not None:
                seen.slices.pop(meta.name, None)
                if not seen.slices:
                    self._drop_pool(pool)
        else:
            if seen is None:
                seen = self._pools[pool] = _PoolSeen(node, self._prefix + resource)
                self._node_pools.setdefault(node, set()).add(pool)
            seen.slices[meta.name] = _seen(s, self._domain)
        self._compare(node)

    def _slices_listed(self, names: set[str]) -> None:
        for pool, seen in list(self._pools.items()):
            for name in list(seen.slices):
                if name not in names:
                    del seen.slices[name]
            if not seen.slices:
                self._drop_pool(pool)
                self._compare(seen.node)

    def _drop_pool(self, pool: str) -> None:
        seen = self._pools.pop(pool, None)
        if seen is not None:
            pools = self._node_pools.get(seen.node)
            if pools is not None:
                pools.discard(pool)
                if not pools:
                    del self._node_pools[seen.node]

    def _compare(self, node: str) -> None:
        """The cluster changed for `node`: mirror it while building or following, else
        re-assert the ledger where it differs."""
        shown = self._shown(node)
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
        for pool in self._node_pools.get(node, ()):
            have.setdefault(self._pools[pool].resource, []).append(pool)
        for resource in set(capacities) | set(have):
            short = resource[len(self._prefix) :]
            group = group_name(node, short)
            if self._foreign_in(group) is not None:
                continue  # refused by the guard; never written
            wanted = self._wanted(node, short, group, capacities.get(resource, 0))
            if set(wanted) != set(have.get(resource, ())):
                return True
            if any(not _unchanged(self._pools[p], w) for p, w in wanted.items()):
                return True
        return False

    def _wanted(self, node: str, short: str, group: str, count: int) -> dict[str, Want]:
        """Pool name -> what it should publish (`publication`)."""
        held = self._allocated.get(group, {})
        shown = [
            d
            for p in self._node_pools.get(node, ())
            if _group(p) == group
            for s in self._pools[p].current()
            for d in s.devices
        ]
        wants = publication(count, held, self._taints, shown)
        return {pool_name(node, short, i): w for i, w in wants.items()}

    def _claim(self, kind: str, c: ResourceClaim) -> None:
        uid = c.metadata.uid
        old = self._claims.pop(uid, ())
        for pool, device in old:
            self._unhold(pool, device)
        alloc = c.status.allocation
        held: tuple[tuple[str, str], ...] = ()
        if kind != "DELETED" and alloc is not None:
            held = tuple(
                (r.pool, r.device) for r in alloc.devices.results if r.driver == self.driver
            )
        if held:
            self._claims[uid] = held
            for pool, device in held:
                per = self._allocated.setdefault(_group(pool), {})
                per[device] = per.get(device, 0) + 1
        if held != old:
            self._count(uid)
        if held:
            self._held_elsewhere(held)
        self._released(tuple(set(old) - set(held)))

    def _count(self, uid: str) -> None:
        """Make the ledger hold what claim `uid` holds: on each node, its devices of each
        resource (one holder per node; a claim of node-local devices has one). Devices of a
        pool another writer publishes are not ours to count; those of a resource whose name
        no slice has shown yet are counted once one does."""
        per: dict[str, dict[str, int]] = {}
        unknown = False
        for pool, _ in self._claims.get(uid, ()):
            node, _, rest = pool.partition("/")
            if pool in self._foreign or not rest:
                continue
            resource = self._resources.get(rest.rpartition("/")[0])
            if resource is None:
                unknown = True
                continue
            amounts = per.setdefault(node, {})
            amounts[resource] = amounts.get(resource, 0) + 1
        if unknown:
            self._unresolved.add(uid)
        else:
            self._unresolved.discard(uid)
        holders = {f"claim:{uid}:{node}": (node, amounts) for node, amounts in per.items()}
        for holder, (node, amounts) in holders.items():
            self._ledger.observe_bound(holder, node, amounts, kind=HolderKind.CLAIM)
        gone = [h for h in self._holders.pop(uid, ()) if h not in holders]
        if gone:
            self._ledger.release_all(gone)
        if holders:
            self._holders[uid] = tuple(holders)

    def _learn(self, short: str) -> None:
        """A resource's name, as its pools name it; claims waiting for it are counted."""
        key = dns_name(short)
        if key not in self._resources:
            self._resources[key] = self._prefix + short
            for uid in list(self._unresolved):
                self._count(uid)

    def _held_elsewhere(self, held: Iterable[tuple[str, str]]) -> None:
        # kube-scheduler allocated a device a decrease has since unpublished (it allocates in
        # memory, then writes the claim): publish it again at once, so the node never shows
        # fewer devices than its pods hold.
        for pool, device in held:
            seen = self._pools.get(pool)
            shown = seen.current() if seen is not None else []
            if not any(device in s.devices for s in shown):
                node = seen.node if seen is not None else pool.partition("/")[0]
                if not self._building and self._may_write():
                    self.drifted(node)

    def _unhold(self, pool: str, device: str) -> None:
        group = _group(pool)
        per = self._allocated.get(group)
        if per is None:
            return
        left = per.get(device, 0) - 1
        if left > 0:
            per[device] = left
        else:
            per.pop(device, None)
            if not per:
                del self._allocated[group]

    def _released(self, devices: Iterable[tuple[str, str]]) -> None:
        # A device kept only because a claim held it may go now: look at its node again.
        for pool in {p for p, _ in devices}:
            seen = self._pools.get(pool)
            if seen is not None and not self._building and self._may_write():
                self.drifted(seen.node)

    def _claims_listed(self, uids: set[str]) -> None:
        for uid in list(self._claims):
            if uid not in uids:
                held = self._claims.pop(uid)
                for pool, device in held:
                    self._unhold(pool, device)
                self._count(uid)
                self._released(held)

    def _class(self, kind: str, c: DeviceClass) -> None:
        name = c.metadata.name
        before = self._classes.get(name)
        self._forget_class(name)
        if kind == "DELETED":
            return
        self._classes[name] = c
        mapped = c.spec.extended_resource_name
        if mapped and mapped.startswith(self._prefix) and not _ours(c.metadata):
            if before is None or before.spec.extended_resource_name != mapped:
                log.warning(
                    "DeviceClass not written by us maps a resource of our domain: "
                    "none published under that name",
                    extra={"device_class": name, "resource": mapped},
                )
            self._mapped[mapped] = name

    def _forget_class(self, name: str) -> None:
        old = self._classes.pop(name, None)
        mapped = old.spec.extended_resource_name if old is not None else None
        if mapped and self._mapped.get(mapped) == name:
            del self._mapped[mapped]

    def _classes_listed(self, names: set[str]) -> None:
        for name in list(self._classes):
            if name not in names:
                self._forget_class(name)

    # ---- NodeWriter ----------------------------------------------------------------------------

    @property
    def _resource_label(self) -> str:
        return f"{self._domain}/resource"

    @property
    def _capacity_label(self) -> str:
        """On a tainted slice: the group's capacity (its devices are the held ones)."""
        return f"{self._domain}/capacity"

    @property
    def _taint_key(self) -> str:
        """The NoSchedule taint of a device held above its node's capacity."""
        return f"{self._domain}/over-capacity"

    def _shown(self, node: str) -> dict[str, int]:
        """Each resource's capacity as the node's slices show it: the devices of its pools,
        or the capacity a tainted slice carries (its devices are then the held ones)."""
        out: dict[str, int] = {}
        labelled: dict[str, int] = {}
        for pool in self._node_pools.get(node, ()):
            seen = self._pools[pool]
            units = seen.units()
            if units:
                out[seen.resource] = out.get(seen.resource, 0) + units
            cap = seen.capacity()
            if cap is not None:
                labelled[seen.resource] = min(cap, labelled.get(seen.resource, cap))
        return {**out, **labelled}

    def _last_known(self, node: str) -> Mapping[str, int] | None:
        return self._shown(node) if node in self._node_pools else None

    def _forget(self, node: str) -> None:
        pass  # a node's pools leave with their slices' delete events

    def _stale(self, node: str) -> None:
        for pool in self._node_pools.get(node, ()):
            self._pools[pool].stale = True

    async def _converge(self, node: str) -> bool:
        view = self._ledger.node(node)
        desired = dict(view.ephemeral) if view is not None else {}
        resources = set(desired) | {self._pools[p].resource for p in self._node_pools.get(node, ())}
        wrote = False
        for resource in sorted(resources):
            wrote |= await self._publish(node, resource, desired.get(resource, 0))
        return wrote

    async def _publish(self, node: str, resource: str, count: int) -> bool:
        short = resource[len(self._prefix) :]
        group = group_name(node, short)
        if self._foreign_in(group) is not None:
            return False  # refused by the guard; never overwritten
        wrote = False
        for _ in range(_CONFLICT_RETRIES + 1):
            if any(self._pools[p].stale for p in self._node_pools.get(node, ())):
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
        have = [p for p in self._node_pools.get(node, ()) if self._pools[p].resource == resource]
        wrote = False
        for pool, want in sorted(wanted.items()):
            seen = self._pools.get(pool)
            if seen is not None and _unchanged(seen, want):
                continue
            await self._ensure_class(short, resource)
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
            if want.tainted and not _seen(written, self._domain).tainted:
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
                await self._delete(f"{GROUP}/resourceslices/{other}", f"deleting slice {other}")
                self._forget_slice(pool, other)
            wrote = True
        for pool in sorted(set(have) - set(wanted)):
            for name in list(self._pools[pool].slices):
                self._check_leading()
                await self._delete(f"{GROUP}/resourceslices/{name}", f"deleting slice {name}")
                self._forget_slice(pool, name)
            wrote = True
        if have and not wanted and not self._ledger.has_resource(resource):
            await self._delete_class(short)
        return wrote

    def _slice_body(
        self,
        name: str,
        node: str,
        short: str,
        pool: str,
        generation: int,
        want: Want,
    ) -> dict[str, Any]:
        taints = [{"key": self._taint_key, "effect": "NoSchedule"}] if want.tainted else []
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
        if self._settings.dra_skip_node_operations:
            # Nothing to prepare on the node: a unit is a count, not a device to set up.
            spec["skipNodeOperations"] = ["*"]
        labels = {MANAGED_BY[0]: MANAGED_BY[1], self._resource_label: short}
        if want.capacity is not None:
            labels[self._capacity_label] = str(want.capacity)
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
        }

    def _forget_slice(self, pool: str, name: str) -> None:
        seen = self._pools.get(pool)
        if seen is not None:
            seen.slices.pop(name, None)
            if not seen.slices:
                self._drop_pool(pool)

    async def _reread(self, node: str) -> None:
        """List the node's slices of our driver afresh (after a conflict or a failure)."""
        reply = await self._api.request(
            "GET",
            f"{GROUP}/resourceslices",
            params={"fieldSelector": f"spec.nodeName={node},spec.driver={self.driver}"},
            what=f"listing slices of node {node}",
        )
        page = msgspec.json.decode(reply, type=_SliceList)
        for pool in list(self._node_pools.get(node, ())):
            self._drop_pool(pool)
        building = self._building
        self._building = False  # a re-read is not an adoption
        try:
            for s in page.items:
                if s.metadata.labels.get(MANAGED_BY[0]) == MANAGED_BY[1]:
                    pool = s.spec.pool.name
                    resource = s.metadata.labels.get(self._resource_label, "")
                    if resource:
                        self._learn(resource)
                        seen = self._pools.setdefault(
                            pool, _PoolSeen(node, self._prefix + resource)
                        )
                        self._node_pools.setdefault(node, set()).add(pool)
                        seen.slices[s.metadata.name] = _seen(s, self._domain)
        finally:
            self._building = building

    async def _delete(self, path: str, what: str) -> None:
        try:
            await self._api.request("DELETE", path, what=what)
        except ApiError as e:
            if e.status != 404:
                raise

    # ---- device classes ------------------------------------------------------------------------

    def class_name(self, short: str) -> str:
        return f"{dns_name(short)}.{self._domain}"

    async def _ensure_class(self, short: str, resource: str) -> None:
        name = self.class_name(short)
        known = self._classes.get(name)
        if known is not None and _ours(known.metadata):
            return
        if known is not None:
            raise ApiError(409, f"DeviceClass {name} exists and is not ours", f"class {name}")
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name, "labels": {MANAGED_BY[0]: MANAGED_BY[1]}},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f'device.driver == "{self.driver}" && '
                            f'device.attributes["{self.driver}"].resource == "{short}"'
                        }
                    }
                ],
                "extendedResourceName": resource,
            },
        }
        self._check_leading()
        try:
            reply = await self._api.request(
                "POST",
                f"{GROUP}/deviceclasses",
                body=msgspec.json.encode(body),
                content_type="application/json",
                what=f"creating device class {name}",
            )
        except ApiError as e:
            if e.status != 409:
                raise
            reply = await self._api.request(
                "GET", f"{GROUP}/deviceclasses/{name}", what=f"reading device class {name}"
            )
        self._class("ADDED", msgspec.json.decode(reply, type=DeviceClass))

    async def _delete_class(self, short: str) -> None:
        name = self.class_name(short)
        known = self._classes.get(name)
        if known is None or not _ours(known.metadata):
            return
        self._check_leading()
        await self._delete(f"{GROUP}/deviceclasses/{name}", f"deleting device class {name}")
        self._forget_class(name)


class _SliceList(Struct, frozen=True, gc=False):
    items: list[ResourceSlice] = []


def _unchanged(seen: _PoolSeen, want: Want) -> bool:
    """Whether the pool shows exactly these devices, taints and capacity, in its one slice."""
    if len(seen.slices) != 1:
        return False
    (only,) = seen.slices.values()
    return (
        only.count == 1
        and only.devices == want.devices
        and only.tainted == want.tainted
        and only.capacity == want.capacity
    )


def _group(pool: str) -> str:
    """The group (node/name) of one of our pool names (node/name/index)."""
    return pool.rsplit("/", 1)[0]


def _name(obj: ResourceSlice | DeviceClass) -> str:
    return obj.metadata.name


def _uid(obj: ResourceClaim) -> str:
    return obj.metadata.uid


def _ours(meta: ObjectMeta) -> bool:
    return meta.labels.get(MANAGED_BY[0]) == MANAGED_BY[1]


def _seen(s: ResourceSlice, domain: str) -> _Seen:
    capacity = s.metadata.labels.get(f"{domain}/capacity", "")
    taint_key = f"{domain}/over-capacity"
    return _Seen(
        s.metadata.name,
        s.metadata.resource_version,
        s.spec.pool.generation,
        s.spec.pool.resource_slice_count,
        tuple(d.name for d in s.spec.devices),
        any(t.key == taint_key for d in s.spec.devices for t in d.taints),
        int(capacity) if capacity.isdigit() else None,
    )
