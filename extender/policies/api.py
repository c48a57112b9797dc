"""The policy API's logic: ESCHER's set_resource and get_cluster_state over the ledger.

`set_resource` resolves where a resource goes (a node, a label selector, a resource vector
the node's *available* resources must cover, or every node; optionally capped by num_nodes)
and applies it to the ledger in one atomic step. `cluster_state` renders a snapshot. Called
by the HTTP routes (extender.http.policy), by the ESLs' in-service backend
(extender.esl.backends.LedgerBackend) and by the pure approach's backend
(extender.esl.kube.nodestatus); pure, no I/O. Every refusal is a core error
(extender.core.errors) naming the field, and nothing was changed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated

import msgspec
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, model_validator

from extender.core import names, quantity
from extender.core.errors import NoMatch, NotFound, UnknownNode
from extender.core.ledger import Ledger, NodeView, Snapshot, check_above_allocated
from extender.core.ledger import check_unheld as ledger_check_unheld

Quantity = StrictStr | StrictInt
Capacity = Annotated[StrictInt, Field(ge=0, le=quantity.MAX)]


class ResourceSpec(BaseModel):
    """Body of PUT /v1/resources/{name}: ESCHER's set_resource."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"capacity": 4, "node": "node-1"},
                {"capacity": 1, "node_selector": {"zone": "a"}},
                {"capacity": 2, "node_spec": {"cpu": "4", "memory": "8Gi"}, "num_nodes": 3},
            ]
        },
    )

    capacity: Capacity = Field(description="Units per node, 0..2^63-1; 0 removes it.")
    node: Annotated[StrictStr, Field(max_length=253)] | None = Field(
        None, description="Exactly this node."
    )
    node_selector: dict[StrictStr, StrictStr] | None = Field(
        None, description="Nodes whose labels include all of these.", max_length=64
    )
    node_spec: dict[StrictStr, Quantity] | None = Field(
        None,
        description="Nodes whose available resources cover this vector "
        "(cpu, memory, pods, or full extended-resource names).",
        max_length=64,
    )
    num_nodes: Annotated[StrictInt, Field(ge=1, le=1_000_000)] | None = Field(
        None, description="At most this many of the matching nodes."
    )

    @model_validator(mode="after")
    def _one_target(self) -> ResourceSpec:
        given = [f for f in ("node", "node_selector", "node_spec") if getattr(self, f) is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of node, node_selector, node_spec (got {given})")
        return self


@dataclass(frozen=True, slots=True)
class Usage:
    """One resource on one node. A plain dataclass (pydantic validates and documents it all
    the same): get_cluster_state makes one per node and resource read."""

    capacity: int
    allocated: int
    available: int


class SetResourceResult(BaseModel):
    """Reply of PUT /v1/resources/{name}."""

    resource: str = Field(description="The full name pods request: <domain>/<name>.")
    nodes: dict[str, int] = Field(description="The capacity now set, per node it was set on.")
    version: int = Field(description="The ledger version after the change.")
    durable: bool = Field(description="False (HTTP 202) if not yet written to the nodes.")


class DeleteResourceResult(BaseModel):
    resource: str
    removed_from: list[str]
    durable: bool = Field(description="False (HTTP 202) if not yet removed from the nodes.")


class ResourceState(BaseModel):
    resource: str
    nodes: dict[str, Usage]


class ClusterState(BaseModel):
    """ESCHER's get_cluster_state. Integers in the ledger's units: cpu in millicores,
    memory in bytes, the rest in units."""

    version: int
    nodes: Mapping[str, Mapping[str, Usage]]
    # Not ESCHER's: the topology domains (zone, rack, ...) gang policies place within
    # (extender.esl.domains) are node labels, and a remote ESL has no other way to read them.
    labels: Mapping[str, Mapping[str, str]] = Field(
        default_factory=dict, description="Each node's labels."
    )


def target_nodes(ledger: Ledger, resource: str, spec: ResourceSpec, learn: bool) -> list[str]:
    """The nodes `spec` names, in the order num_nodes picks from.

    `learn` (standalone mode, no cluster to know nodes from): a named node that is not known
    yet is created, once its name is checked and only when there is something to set on it.
    """
    snap = ledger.snapshot()
    if spec.node is not None:
        if spec.node not in snap.nodes:
            if not learn or spec.capacity == 0:
                raise UnknownNode([spec.node])
            ledger.learn_nodes([names.check_node_name(spec.node)])
        return [spec.node]
    if spec.node_selector is not None:
        sel = spec.node_selector
        nodes = [
            n for n, v in snap.nodes.items() if all(v.labels.get(k) == x for k, x in sel.items())
        ]
        if not nodes:
            raise NoMatch(f"node_selector {sel} matches no node", "node_selector")
    elif spec.node_spec is not None:
        want = {r: _requested(r, q, f"node_spec[{r[:64]}]") for r, q in spec.node_spec.items()}
        nodes = [
            n for n, v in snap.nodes.items() if all(v.available(r) >= q for r, q in want.items())
        ]
        if not nodes:
            raise NoMatch(
                f"node_spec {spec.node_spec} matches no node's available resources", "node_spec"
            )
    else:
        nodes = list(snap.nodes)
        if not nodes:
            raise NoMatch("no nodes are known yet", "node")
    if not spec.num_nodes:
        nodes.sort()  # by name in C: the key below costs a Python call per node
        return nodes
    # num_nodes keeps nodes that already have the resource first, so a resize is stable.
    nodes.sort(key=lambda n: (resource not in snap.nodes[n].ephemeral, n))
    return nodes[: spec.num_nodes]


def _requested(resource: str, value: str | int, field: str) -> int:
    if isinstance(value, int):
        return quantity.capacity(value, field=field) * (1000 if resource == names.CPU else 1)
    return quantity.amount(resource, value, field=field)


def set_resource(
    ledger: Ledger, domain: str, name: str, spec: ResourceSpec, learn: bool = False
) -> tuple[str, dict[str, int], int]:
    """Apply `spec` to resource `name`; returns (full name, {node: capacity}, version)."""
    full = names.full_name(domain, name)
    nodes = target_nodes(ledger, full, spec, learn)
    capacity = dict.fromkeys(nodes, spec.capacity)
    return full, capacity, ledger.set_capacity(full, capacity)


def check_resource(ledger: Ledger, domain: str, name: str, spec: ResourceSpec) -> None:
    """set_resource's refusals, without applying anything: for a store that must write the
    change elsewhere first (extender.policies.kube)."""
    full = names.full_name(domain, name)
    nodes = target_nodes(ledger, full, spec, learn=False)
    check_above_allocated(ledger.snapshot().nodes, full, dict.fromkeys(nodes, spec.capacity))


def check_unheld(ledger: Ledger, domain: str, name: str) -> None:
    """delete_resource's refusal without force (pods hold it), without removing anything."""
    full = names.full_name(domain, name)
    snap = ledger.snapshot()
    ledger_check_unheld(snap.nodes, full, snap.nodes)


def delete_resource(
    ledger: Ledger, domain: str, name: str, force: bool = False
) -> tuple[str, list[str], int]:
    """Remove resource `name` from every node; returns (full name, nodes, version).

    NotFound when no node has it; Conflict while pods hold it, unless `force`.
    """
    full = names.full_name(domain, name)
    nodes = ledger.remove_resource(full, force=force)
    if not nodes:
        raise NotFound(f"resource {full} not found", "name")
    return full, nodes, ledger.version


def resource_state(snap: Snapshot, full: str) -> ResourceState:
    state = ResourceState(
        resource=full,
        nodes={
            n: _usage(v.ephemeral[full], v.used.get(full, 0))
            for n, v in snap.nodes.items()
            if full in v.ephemeral
        },
    )
    if not state.nodes:
        raise NotFound(f"resource {full} not found", "name")
    return state


def cluster_state(snap: Snapshot) -> ClusterState:
    """ESCHER's get_cluster_state: per node, capacity/allocated/available of every resource.

    Lazy: a node's entry, and each resource's Usage, is made when it is read, so an ESL that
    reads one resource of every node pays for that, not for every resource of every node.
    """
    return ClusterState.model_construct(
        version=snap.version, nodes=_Nodes(snap), labels=_Labels(snap)
    )


class _Labels(Mapping[str, Mapping[str, str]]):
    def __init__(self, snap: Snapshot) -> None:
        self._views = snap.nodes

    def __getitem__(self, node: str) -> Mapping[str, str]:
        return self._views[node].labels

    def __iter__(self) -> Iterator[str]:
        return iter(self._views)

    def __len__(self) -> int:
        return len(self._views)


class _Nodes(Mapping[str, Mapping[str, Usage]]):
    def __init__(self, snap: Snapshot) -> None:
        self._views = snap.nodes

    def __getitem__(self, node: str) -> Mapping[str, Usage]:
        return _Resources(self._views[node])

    def __iter__(self) -> Iterator[str]:
        return iter(self._views)

    def __len__(self) -> int:
        return len(self._views)


class _Resources(Mapping[str, Usage]):
    def __init__(self, view: NodeView) -> None:
        self._view = view

    def __getitem__(self, resource: str) -> Usage:
        v = self._view
        cap = v.ephemeral.get(resource, v.physical.get(resource))
        if cap is None:
            raise KeyError(resource)
        return _usage(cap, v.used.get(resource, 0))

    def __contains__(self, resource: object) -> bool:
        # Without building the Usage that Mapping's default would: ESLs ask this per node.
        return resource in self._view.ephemeral or resource in self._view.physical

    def __iter__(self) -> Iterator[str]:
        yield from self._view.physical
        yield from (r for r in self._view.ephemeral if r not in self._view.physical)

    def __len__(self) -> int:
        return len(self._view.physical.keys() | self._view.ephemeral.keys())


def cluster_state_json(snap: Snapshot) -> bytes:
    """get_cluster_state as the JSON the policy API answers, straight from the snapshot."""
    nodes: dict[str, dict[str, dict[str, int]]] = {}
    labels: dict[str, dict[str, str]] = {}
    for name, v in snap.nodes.items():
        labels[name] = dict(v.labels)
        entry: dict[str, dict[str, int]] = {}
        for r, cap in (*v.physical.items(), *v.ephemeral.items()):
            held = v.used.get(r, 0)
            entry[r] = {"capacity": cap, "allocated": held, "available": max(0, cap - held)}
        nodes[name] = entry
    return msgspec.json.encode({"version": snap.version, "nodes": nodes, "labels": labels})


def _usage(capacity: int, allocated: int) -> Usage:
    return Usage(capacity, allocated, max(0, capacity - allocated))
