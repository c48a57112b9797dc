"""The cluster view: the ledger filled from the API server and kept in step, and pod events.

Two informers (extender.kube.informer): nodes, and pods that are not finished (pending
and bound; a pod that finishes leaves the watch's field selector, which the API server
reports as a deletion, as kube-scheduler's own cache drops Succeeded and Failed pods).

- Nodes give the ledger their labels, taints and physical allocatable. Their ephemeral
  resources (the write-back's work) are adopted as the truth while the ledger is being built
  (a restart resumes exactly where the cluster is) and on a replica that does not lead (it
  stays warm for a failover); otherwise the ledger is the truth, and what the node shows is
  handed to the write-back, which re-asserts the ledger's values where they differ.
- Bound pods become the ledger's facts (their requests on their node); every pod change is
  published as a PodEvent (extender.core.events) to the gang feature and the verbs. In mode
  dra a pod's requests of the domain are not counted: kube-scheduler allocates them as DRA
  devices in a ResourceClaim, which the slice publisher counts (extender.dra.slices).

A terminating pod still holds its place until it is gone, as kube-scheduler counts it; for
its gang it stops counting at once. Malformed objects are skipped, counted and logged.
Created and run by extender.service.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping

import msgspec

from extender.core import quantity
from extender.core.errors import CoreError
from extender.core.events import PodChange, PodEvent, PodEvents
from extender.core.ledger import Ledger
from extender.core.objects import Node, NodeSpec, NodeStatus, Pod
from extender.core.pod import Keys, pod_info
from extender.kube.client import KubeAPI
from extender.kube.informer import Handler, Informer
from extender.metrics import Metrics
from extender.writeback.nodes import Owned

log = logging.getLogger(__name__)

_POD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"
NodeSeen = Callable[[str, str, Owned, Owned], None]


class _Look(msgspec.Struct, frozen=True, gc=False):
    """What a full look at a node read (its status and spec as decoded: allocatable,
    capacity, taints, unschedulable; its labels) and made of it. The next event of the node
    that reads the same is a heartbeat: at 5,000 nodes about 150 a second, each 17 us
    before, 5 us now (hack/node-event-cost.py).

    Not tracked by the garbage collector, as what it holds is not (frozen msgspec Structs
    with tuples, dicts of strings and numbers): one per node, replaced when the node
    changes, so 5,000 of them were in every full collection's walk at 5,000 nodes."""

    status: NodeStatus
    spec: NodeSpec
    labels: Mapping[str, str]
    adopt: bool
    capacity: Owned
    shown: Owned


class ClusterView:
    def __init__(
        self,
        api: KubeAPI,
        ledger: Ledger,
        keys: Keys,
        events: PodEvents,
        metrics: Metrics,
        adopt: Callable[[], bool],
        on_node_seen: NodeSeen | None = None,
        advertised: Collection[str] = (),
        node_resources: bool = True,
        on_node_gone: Callable[[str], None] | None = None,
        on_node_added: Callable[[str], None] | None = None,
    ) -> None:
        self.ledger = ledger
        self.keys = keys
        self.events = events
        self.prefix = ledger.prefix
        self._adopt = adopt
        self._on_node_seen = on_node_seen
        # The write-back's own keys outside the domain (the markers): reported to it with the
        # domain's, never taken into the ledger.
        self._advertised = frozenset(advertised)
        # Whether the ephemeral resources live in Node status (off in mode dra: they are
        # ResourceSlices, and a domain key left on a node is neither adopted nor counted; the
        # allocations are the claims', so a bound pod counts only its other requests).
        self._node_resources = node_resources
        self._on_node_gone = on_node_gone
        self._on_node_added = on_node_added
        self._mixed: set[str] = set()  # nodes warned of showing the domain in mode dra
        self._looked: dict[str, _Look] = {}  # per node, what its last full look read
        self._building = True
        self._pods: set[str] = set()  # uids published as present
        self.nodes = Informer(
            api,
            "nodes",
            "/api/v1/nodes",
            Node,
            Handler(self._node, self._nodes_listed, lambda n: n.metadata.name),
            metrics,
        )
        self.pods = Informer(
            api,
            "pods",
            "/api/v1/pods",
            Pod,
            Handler(self._pod, self._pods_listed, lambda p: p.metadata.uid),
            metrics,
            field_selector=_POD_SELECTOR,
        )

    async def sync(self) -> None:
        """Fill the ledger: nodes (their written ephemeral resources are the truth), then pods."""
        self._building = True
        await self.nodes.sync()
        await self.pods.sync()
        self._building = False
        log.info("ledger built from the cluster", extra={"nodes": len(self.ledger.node_names())})

    # ---- nodes ---------------------------------------------------------------------------

    def _node(self, kind: str, node: Node) -> None:
        name = node.metadata.name
        if kind == "DELETED":
            self.ledger.remove_node(name)
            self._mixed.discard(name)
            self._looked.pop(name, None)
            if self._on_node_gone is not None:
                self._on_node_gone(name)
            return
        adopt = (self._building or self._adopt()) and self._node_resources
        last = self._looked.get(name)
        if (
            last is not None
            and not self._building
            and last.adopt == adopt
            and last.status == node.status
            and last.spec == node.spec
            and last.labels == node.metadata.labels
            and self.ledger.node(name) is not None
        ):
            # A heartbeat (kubelet's, kwok's): nothing the ledger reads changed. Only its
            # resourceVersion is news, for the write-back.
            if self._on_node_seen is not None and self._node_resources:
                self._on_node_seen(name, node.metadata.resource_version, last.capacity, last.shown)
            return
        physical: dict[str, int] = {}
        ephemeral: dict[str, int] = {}
        shown: dict[str, int | None] = {}
        for res, text in node.status.allocatable.items():
            if res in self._advertised:
                shown[res] = _whole(text)
                continue
            field = f"node {name} status.allocatable[{res}]"
            try:
                value: int | None = quantity.amount(res, text, field=field)
            except quantity.InvalidQuantity as e:
                value = None
                if not res.startswith(self.prefix):
                    log.warning("node quantity skipped", extra={"node": name, "error": str(e)})
                    continue
            if res.startswith(self.prefix):
                if not self._node_resources:
                    self._warn_mixed(name, res)
                    continue
                shown[res] = value
                if value is not None:
                    ephemeral[res] = value
            elif value is not None:
                physical[res] = value
        capacity = {
            r: _whole(t)
            for r, t in node.status.capacity.items()
            if r.startswith(self.prefix) or r in self._advertised
        }
        new = self.ledger.node(name) is None
        self.ledger.upsert_node(
            name,
            node.metadata.labels,
            physical,
            ephemeral if adopt else None,
            node.spec.taints,
            node.spec.unschedulable,
        )
        if self._on_node_seen is not None and self._node_resources:
            self._on_node_seen(name, node.metadata.resource_version, capacity, shown)
        self._looked[name] = _Look(
            node.status, node.spec, node.metadata.labels, adopt, capacity, shown
        )
        if new and not self._building and self._on_node_added is not None:
            self._on_node_added(name)

    def _warn_mixed(self, node: str, resource: str) -> None:
        # kube-scheduler takes a resource a node shows in status.allocatable as the node's own
        # and skips DRA for it there: pods would be placed against that value, not the
        # devices (left by pure mode, say). Said once per node; the operator removes it.
        if node not in self._mixed:
            self._mixed.add(node)
            log.warning(
                "node status shows a resource of the domain: kube-scheduler uses it instead "
                "of the published devices on that node; remove it from status.capacity and "
                "status.allocatable",
                extra={"node": node, "resource": resource},
            )

    def _nodes_listed(self, names: set[str]) -> None:
        for name in set(self.ledger.node_names()) - names:
            log.info("node disappeared while not watched", extra={"node": name})
            self.ledger.remove_node(name)
            self._looked.pop(name, None)
            if self._on_node_gone is not None:
                self._on_node_gone(name)

    # ---- pods ----------------------------------------------------------------------------

    def _pod(self, kind: str, pod: Pod) -> None:
        uid = pod.metadata.uid
        if not uid:
            return
        try:
            info = pod_info(pod, self.keys, self.prefix)
        except (quantity.InvalidQuantity, CoreError) as e:
            log.warning(
                "malformed pod skipped",
                extra={"pod": f"{pod.metadata.namespace}/{pod.metadata.name}", "error": str(e)},
            )
            self._gone(uid)
            return
        if kind == "DELETED" or info.done:
            self._gone(uid)
            return
        if info.node:
            requests = info.requests
            if not self._node_resources:
                requests = {r: v for r, v in requests.items() if not r.startswith(self.prefix)}
            self.ledger.observe_bound(uid, info.node, requests, info.priority)
        self._pods.add(uid)
        self.events.publish(PodEvent(PodChange.UPSERT, uid, info))

    def _gone(self, uid: str) -> None:
        held = self.ledger.holding(uid)
        self.ledger.release(uid)
        if uid in self._pods:
            self._pods.discard(uid)
            amounts = held.amounts if held is not None else {}
            freed = {r: v for r, v in amounts.items() if r.startswith(self.prefix)}
            self.events.publish(PodEvent(PodChange.GONE, uid, None, freed))

    def _pods_listed(self, uids: set[str]) -> None:
        vanished = self._pods - uids
        for uid in vanished:
            self._gone(uid)
        if vanished:
            log.info("pods vanished while not watched", extra={"pods": len(vanished)})


def _whole(text: str) -> int | None:
    try:
        return quantity.capacity(text, field="capacity")
    except quantity.InvalidQuantity:
        return None
