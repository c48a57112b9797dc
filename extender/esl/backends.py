"""The Backends ESLs run on: one per way of reaching ESCHER's API.

- ExtenderBackend: the extender approach from outside the service, through its policy API
  (extender.esl.client.PolicyClient): the ledger decides, the write-back persists.
- LedgerBackend: the extender approach inside the service (the /v1/esl endpoints): calls
  extender.policy on the service's ledger and waits for the write-back, as PUT
  /v1/resources does, remembering whether every change was confirmed on the nodes.
- NodeBackend: the pure approach with no extender service at all: Node objects patched
  directly (extender.adapters.nodestatus), kube-scheduler alone decides.

All three raise BackendError (with the policy API's status and field) for a refused change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from extender import policy
from extender.esl.base import BackendError
from extender.esl.client import PolicyAPIError, PolicyClient
from extender.ledger import Ledger
from extender.policy import ClusterState, PolicyError, ResourceSpec
from extender.resources import InvalidResource, full_name


def _spec(
    capacity: int,
    node: str | None,
    node_selector: Mapping[str, str] | None,
    node_spec: Mapping[str, str | int] | None,
    num_nodes: int | None,
) -> ResourceSpec:
    return ResourceSpec(
        capacity=capacity,
        node=node,
        node_selector=dict(node_selector) if node_selector is not None else None,
        node_spec=dict(node_spec) if node_spec is not None else None,
        num_nodes=num_nodes,
    )


def _apply(
    ledger: Ledger, domain: str, name: str, spec: ResourceSpec, learn: bool = False
) -> tuple[dict[str, int], int]:
    """extender.policy.set_resource with its refusals as BackendError."""
    try:
        _, nodes, version = policy.set_resource(ledger, domain, name, spec, learn=learn)
    except PolicyError as e:
        raise BackendError(e.status, str(e), e.field) from e
    return nodes, version


def _full(domain: str, name: str) -> str:
    try:
        return full_name(domain, name)
    except InvalidResource as e:
        raise BackendError(422, str(e), "name") from e


class ExtenderBackend:
    """The extender's policy API. `scores`: the cluster runs the extender in kube-scheduler's
    path (extender mode), so its prioritize honours preferences."""

    def __init__(self, client: PolicyClient, domain: str = "escher.io", scores: bool = True):
        self.client = client
        self.domain = domain
        self.scores = scores

    def set_resource(
        self,
        name: str,
        capacity: int,
        *,
        node: str | None = None,
        node_selector: Mapping[str, str] | None = None,
        node_spec: Mapping[str, str | int] | None = None,
        num_nodes: int | None = None,
    ) -> dict[str, int]:
        try:
            r = self.client.set_resource(
                name,
                capacity,
                node=node,
                node_selector=node_selector,
                node_spec=node_spec,
                num_nodes=num_nodes,
            )
        except PolicyAPIError as e:
            raise BackendError(e.status, str(e), e.field) from e
        return r.nodes

    def delete_resource(self, name: str) -> None:
        try:
            self.client.delete_resource(name)
        except PolicyAPIError as e:
            if e.status != 404:  # 404: no node has it, which is what was wanted
                raise BackendError(e.status, str(e), e.field) from e

    def cluster_state(self) -> ClusterState:
        try:
            return self.client.cluster_state()
        except PolicyAPIError as e:
            raise BackendError(e.status, str(e), e.field) from e


class LedgerBackend:
    """The service's own ledger. `wait(version, nodes)` waits for the write-back to have
    those nodes at that version (None: nothing to wait for, standalone); `durable` stays
    True while every change since `begin()` was confirmed in time."""

    def __init__(
        self,
        ledger: Ledger,
        domain: str,
        *,
        wait: Callable[[int, list[str]], bool] | None = None,
        learn: bool = False,
        scores: bool = True,
    ) -> None:
        self.ledger = ledger
        self.domain = domain
        self.scores = scores
        self._wait = wait
        self._learn = learn
        self.durable = True

    def begin(self) -> None:
        self.durable = True

    def _confirm(self, version: int, nodes: list[str]) -> None:
        if self._wait is not None and nodes and not self._wait(version, nodes):
            self.durable = False

    def set_resource(
        self,
        name: str,
        capacity: int,
        *,
        node: str | None = None,
        node_selector: Mapping[str, str] | None = None,
        node_spec: Mapping[str, str | int] | None = None,
        num_nodes: int | None = None,
    ) -> dict[str, int]:
        spec = _spec(capacity, node, node_selector, node_spec, num_nodes)
        nodes, version = _apply(self.ledger, self.domain, name, spec, self._learn)
        self._confirm(version, list(nodes))
        return nodes

    def delete_resource(self, name: str) -> None:
        nodes = self.ledger.remove_resource(_full(self.domain, name))
        self._confirm(self.ledger.version, nodes)

    def cluster_state(self) -> ClusterState:
        return policy.cluster_state(self.ledger.snapshot())


class NodeBackend:
    """The pure approach: Node objects patched directly, no extender service.

    Each call reads the cluster afresh (nodes and bound pods), decides exactly as the
    extender's policy API would (extender.policy over a ledger of that read) and patches the
    nodes it changes. Run it against a cluster with no extender service writing the same
    domain (a mode "none" local cluster), or the two would undo each other's writes.
    """

    scores = False  # kube-scheduler alone: no preferences, only what pods request

    def __init__(self, api: Any, domain: str = "escher.io") -> None:
        from extender.adapters.nodestatus import NodeStatus  # the only module that talks to Kube

        self.nodes = NodeStatus(api, domain)
        self.domain = domain

    def set_resource(
        self,
        name: str,
        capacity: int,
        *,
        node: str | None = None,
        node_selector: Mapping[str, str] | None = None,
        node_spec: Mapping[str, str | int] | None = None,
        num_nodes: int | None = None,
    ) -> dict[str, int]:
        spec = _spec(capacity, node, node_selector, node_spec, num_nodes)
        ledger = self.nodes.read()
        before = ledger.snapshot()
        nodes, _ = _apply(ledger, self.domain, name, spec)
        full = _full(self.domain, name)
        for n, cap in nodes.items():
            if before.nodes[n].ephemeral.get(full, 0) != cap:
                self.nodes.patch(n, {full: cap})
        return nodes

    def delete_resource(self, name: str) -> None:
        full = _full(self.domain, name)
        for n in self.nodes.read().remove_resource(full):
            self.nodes.patch(n, {full: 0})

    def cluster_state(self) -> ClusterState:
        return policy.cluster_state(self.nodes.read().snapshot())
