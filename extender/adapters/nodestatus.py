"""ESCHER's pure approach against the Kubernetes API: ephemeral resources as node status.

No extender service: the resources are written straight to the Node objects' status
(`capacity` and `allocatable`, merge patches naming only the domain's keys, so other extended
resources and other writers' keys are left alone), and kube-scheduler's NodeResourcesFit
enforces them like any extended resource. The cluster state is read back from the nodes'
allocatable and the bound pods' requests, into a ledger built for the one read, so the
policy logic (extender.policy: targets, below-allocated checks, cluster_state) is the
extender's own.

Used by extender.esl.backends.NodeBackend. No transaction spans a read and a patch: pods
placed in between are what the ESCHER paper calls its races.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, cast

import urllib3
from kubernetes.client import ApiClient, CoreV1Api

from extender.ledger import Ledger
from extender.resources import InvalidResource, amount, pod_amounts, whole_amount

# Bound pods that still hold their resources (as kube-scheduler counts them).
_POD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
_MERGE_PATCH = "application/merge-patch+json"
_PAGE = 500
_TIMEOUT = (5.0, 60.0)


class NodeStatus:
    def __init__(self, api: ApiClient, domain: str) -> None:
        self._core = CoreV1Api(api)
        self.domain = domain
        self._prefix = domain + "/"

    def read(self) -> Ledger:
        """A ledger filled from the API server now: every node's labels, allocatable and
        domain resources, and every bound pod's amounts."""
        ledger = Ledger(self.domain)
        for node in self._list(self._core.list_node, None):
            meta, status = node["metadata"], node.get("status") or {}
            physical: dict[str, int] = {}
            ephemeral: dict[str, int] = {}
            for k, q in (status.get("allocatable") or {}).items():
                try:
                    if k.startswith(self._prefix):
                        ephemeral[k] = whole_amount(k, q)
                    else:
                        physical[k] = amount(k, q)
                except InvalidResource:
                    continue  # not ours to judge; kube-scheduler reports it
            ledger.upsert_node(meta["name"], meta.get("labels") or {}, physical, ephemeral)
        for pod in self._list(self._core.list_pod_for_all_namespaces, _POD_SELECTOR):
            try:
                amounts = pod_amounts(pod)
            except InvalidResource:
                continue
            ledger.observe_bound(pod["metadata"]["uid"], pod["spec"]["nodeName"], amounts)
        return ledger

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

    def _list(self, fn: Any, selector: str | None) -> Iterator[dict[str, Any]]:
        token = ""
        while True:
            kwargs: dict[str, Any] = {"limit": _PAGE, "_request_timeout": _TIMEOUT}
            if selector:
                kwargs["field_selector"] = selector
            if token:
                kwargs["_continue"] = token
            resp = cast(urllib3.HTTPResponse, fn(_preload_content=False, **kwargs))
            try:
                page = json.loads(resp.data)
            finally:
                resp.release_conn()
            yield from page.get("items") or []
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return
