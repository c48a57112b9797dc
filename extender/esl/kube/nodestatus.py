"""ESCHER's pure approach against the Kubernetes API: ephemeral resources as node status.

NodeBackend is the ESL Backend (extender.esl.base.Backend) of the pure approach, for
applications and benchmarks that run ESLs with no extender service in kube-scheduler's path:
the resources are written straight to the Node objects' status (capacity and allocatable,
merge patches naming only the domain's keys, so other extended resources and other writers'
keys are left alone), and kube-scheduler's NodeResourcesFit enforces them like any extended
resource. Each call reads the cluster afresh (nodes and bound pods) into a ledger of its own
and decides exactly as the extender's policy API would (extender.policies.api). It is synchronous
(the official kubernetes client), as ESLs are.

No transaction spans a read and a patch: pods placed in between are what the ESCHER paper
calls its races. Do not point it at a cluster whose extender service writes the same domain:
the two would undo each other's writes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, TypeVar, cast

import msgspec
import urllib3
from kubernetes.client import ApiClient, CoreV1Api

from extender.core import quantity
from extender.core.errors import NotFound
from extender.core.ledger import Ledger
from extender.core.objects import Node, ObjectList, Pod
from extender.core.podrequests import pod_requests
from extender.esl.base import UNBOUNDED
from extender.gang import topology
from extender.gang.topology import Hierarchy
from extender.policies import api as policy
from extender.policies.api import ClusterState, ResourceSpec

# Bound pods that still hold their resources (as kube-scheduler counts them).
_POD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
_MERGE_PATCH = "application/merge-patch+json"
_PAGE = 500
_TIMEOUT = (5.0, 60.0)
T = TypeVar("T")


class NodeBackend:
    in_path = False  # kube-scheduler alone decides: no preferences, no gang filter
    unbounded = UNBOUNDED

    def __init__(
        self, api: ApiClient, domain: str = "escher.io", hierarchy: Hierarchy | None = None
    ) -> None:
        self._core = CoreV1Api(api)
        self.domain = domain
        self.hierarchy = hierarchy or topology.parse(topology.DEFAULT)
        self._prefix = domain + "/"

    def read(self) -> Ledger:
        """A ledger filled from the API server now: every node's labels, allocatable and
        domain resources, and every bound pod's requests."""
        ledger = Ledger(self.domain)
        for node in self._list(self._core.list_node, None, Node):
            physical: dict[str, int] = {}
            ephemeral: dict[str, int] = {}
            for k, q in node.status.allocatable.items():
                try:
                    v = quantity.amount(k, q, field=k)
                except quantity.InvalidQuantity:
                    continue  # not ours to judge; kube-scheduler reports it
                (ephemeral if k.startswith(self._prefix) else physical)[k] = v
            ledger.upsert_node(
                node.metadata.name,
                node.metadata.labels,
                physical,
                ephemeral,
                node.spec.taints,
                node.spec.unschedulable,
            )
        for pod in self._list(self._core.list_pod_for_all_namespaces, _POD_SELECTOR, Pod):
            try:
                requests = pod_requests(pod.spec)
            except quantity.InvalidQuantity:
                continue
            ledger.observe_bound(pod.metadata.uid, pod.spec.node_name, requests)
        return ledger

    def set_resource(self, name: str, spec: ResourceSpec) -> dict[str, int]:
        ledger = self.read()
        before = ledger.snapshot()
        full, nodes, _ = policy.set_resource(ledger, self.domain, name, spec)
        for n, cap in nodes.items():
            if before.nodes[n].ephemeral.get(full, 0) != cap:
                self.patch(n, {full: cap})
        return nodes

    def delete_resource(self, name: str) -> None:
        try:
            full, nodes, _ = policy.delete_resource(self.read(), self.domain, name, force=True)
        except NotFound:
            return
        for n in nodes:
            self.patch(n, {full: 0})

    def cluster_state(self) -> ClusterState:
        return policy.cluster_state(self.read().snapshot())

    def patch(self, node: str, capacities: Mapping[str, int]) -> None:
        """Set these domain resources on `node` (0 removes one): one merge patch of the
        status subresource, capacity and allocatable alike (no kubelet copies them)."""
        diff = {k: (str(v) if v else None) for k, v in capacities.items()}
        body = {"status": {"capacity": diff, "allocatable": dict(diff)}}
        resp = cast(
            urllib3.HTTPResponse,
            self._core.patch_node_status(
                node,
                body,
                _content_type=_MERGE_PATCH,
                _preload_content=False,
                _request_timeout=_TIMEOUT,
            ),
        )
        resp.read()
        resp.release_conn()

    def _list(self, fn: Any, selector: str | None, kind: type[T]) -> Iterator[T]:
        decoder = msgspec.json.Decoder(ObjectList[kind])  # type: ignore[valid-type]
        token = ""
        while True:
            kwargs: dict[str, Any] = {"limit": _PAGE, "_request_timeout": _TIMEOUT}
            if selector:
                kwargs["field_selector"] = selector
            if token:
                kwargs["_continue"] = token
            resp = cast(urllib3.HTTPResponse, fn(_preload_content=False, **kwargs))
            try:
                page = decoder.decode(resp.data)
            finally:
                resp.release_conn()
            yield from page.items
            token = page.metadata.continue_
            if not token:
                return
