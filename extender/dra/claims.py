"""The ResourceClaims as the ledger's holdings in mode dra, and the devices they hold.

kube-scheduler allocates a device in memory and writes the claim (PreBind) before it binds the
pod, and it counts a device taken for as long as a claim holds it: so each claim is a holding
in the ledger (HolderKind.CLAIM, per node: its devices of each resource, the resource named by
the pool), which is what get_cluster_state shows allocated and what a decrease is checked
against (409 below it). The held devices are also the ones that must stay published.

Kept by the slice publisher (extender.dra.slices) from its claim informer; it reacts to what
a claim took or released (`observe` and `listed` return it).
"""

from __future__ import annotations

from collections.abc import Iterable

from extender.core.ledger import HolderKind, Ledger
from extender.dra.devices import dns_name, group_of
from extender.dra.objects import ResourceClaim
from extender.dra.pools import Pools

Held = tuple[tuple[str, str], ...]  # (pool, device) of our driver


class ClaimHoldings:
    def __init__(self, ledger: Ledger, prefix: str, driver: str, pools: Pools) -> None:
        self._ledger = ledger
        self._prefix = prefix
        self._driver = driver
        self._pools = pools
        self.held: dict[str, Held] = {}  # claim uid -> (pool, device)
        self._holders: dict[str, tuple[str, ...]] = {}  # claim uid -> its ledger holders
        # A pool names its resource by dns_name: the full names, learnt from our slices.
        self._resources: dict[str, str] = {}
        self._unresolved: set[str] = set()  # claims holding a device of a name not learnt yet
        # Group (node/name) -> device -> claims holding it (device names are unique per group).
        self.allocated: dict[str, dict[str, int]] = {}

    def observe(self, kind: str, c: ResourceClaim) -> tuple[Held, Held]:
        """A claim event: what the claim held before and holds now, counted in the ledger."""
        uid = c.metadata.uid
        old = self.held.pop(uid, ())
        for pool, device in old:
            self._unhold(pool, device)
        alloc = c.status.allocation
        held: Held = ()
        if kind != "DELETED" and alloc is not None:
            held = tuple(
                (r.pool, r.device) for r in alloc.devices.results if r.driver == self._driver
            )
        if held:
            self.held[uid] = held
            for pool, device in held:
                per = self.allocated.setdefault(group_of(pool), {})
                per[device] = per.get(device, 0) + 1
        if held != old:
            self.count(uid)
        return old, held

    def listed(self, uids: set[str]) -> list[Held]:
        """The claims now listed are `uids`: the others are gone; what each held is returned."""
        gone = []
        for uid in list(self.held):
            if uid not in uids:
                held = self.held.pop(uid)
                for pool, device in held:
                    self._unhold(pool, device)
                self.count(uid)
                gone.append(held)
        return gone

    def count(self, uid: str) -> None:
        """Make the ledger hold what claim `uid` holds: on each node, its devices of each
        resource (one holder per node; a claim of node-local devices has one). Devices of a
        pool another writer publishes are not ours to count; those of a resource whose name
        no slice has shown yet are counted once one does."""
        per: dict[str, dict[str, int]] = {}
        unknown = False
        for pool, _ in self.held.get(uid, ()):
            node, _, rest = pool.partition("/")
            if pool in self._pools.foreign or not rest:
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

    def learn(self, short: str) -> None:
        """A resource's name, as its pools name it; claims waiting for it are counted."""
        key = dns_name(short)
        if key not in self._resources:
            self._resources[key] = self._prefix + short
            for uid in list(self._unresolved):
                self.count(uid)

    def in_group(self, group: str) -> Iterable[str]:
        """The devices claims hold in a group (node/name)."""
        return self.allocated.get(group, {})

    def _unhold(self, pool: str, device: str) -> None:
        group = group_of(pool)
        per = self.allocated.get(group)
        if per is None:
            return
        left = per.get(device, 0) - 1
        if left > 0:
            per[device] = left
        else:
            per.pop(device, None)
            if not per:
                del self.allocated[group]
