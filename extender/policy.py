"""The policy API's logic: ESCHER's set_resource and get_cluster_state over the ledger.

`set_resource` resolves where a resource goes (a node, a label selector, a resource vector
the node's *available* resources must cover, or every node; optionally capped by num_nodes)
and applies it to the ledger in one atomic step. `cluster_state` renders a snapshot. Called
by the HTTP routes (extender.app) and, in-process, by ESLs; pure, no I/O.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, model_validator

from extender import resources
from extender.ledger import BelowAllocated, Ledger, LedgerError, Snapshot, UnknownNode

Quantity = StrictStr | StrictInt


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

    capacity: Annotated[StrictInt, Field(ge=0, description="Units per node; 0 removes it.")]
    node: StrictStr | None = Field(None, description="Exactly this node.")
    node_selector: dict[StrictStr, StrictStr] | None = Field(
        None, description="Nodes whose labels include all of these."
    )
    node_spec: dict[StrictStr, Quantity] | None = Field(
        None,
        description="Nodes whose available resources cover this vector "
        "(cpu, memory, pods, or full extended-resource names).",
    )
    num_nodes: Annotated[StrictInt, Field(ge=1)] | None = Field(
        None, description="At most this many of the matching nodes."
    )

    @model_validator(mode="after")
    def _one_target(self) -> ResourceSpec:
        given = [f for f in ("node", "node_selector", "node_spec") if getattr(self, f) is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of node, node_selector, node_spec (got {given})")
        return self


class Usage(BaseModel):
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
    durable: bool


class ResourceState(BaseModel):
    resource: str
    nodes: dict[str, Usage]


class ClusterState(BaseModel):
    """ESCHER's get_cluster_state. Integers in the ledger's units: cpu in millicores,
    memory in bytes, the rest in units."""

    version: int
    nodes: dict[str, dict[str, Usage]]


class PolicyError(Exception):
    """A policy call that cannot be applied; nothing was changed."""

    def __init__(self, status: int, field: str, message: str) -> None:
        self.status = status
        self.field = field
        super().__init__(message)


def target_nodes(ledger: Ledger, resource: str, spec: ResourceSpec, learn: bool) -> list[str]:
    """The nodes `spec` names, in the order num_nodes picks from.

    `learn` (standalone mode): a named node that is not known yet is created.
    """
    snap = ledger.snapshot()
    if spec.node is not None:
        if spec.node not in snap.nodes:
            if not learn:
                raise PolicyError(404, "node", f"node {spec.node!r} not found")
            ledger.ensure_nodes([spec.node])
        return [spec.node]
    if spec.node_selector is not None:
        sel = spec.node_selector
        nodes = [
            n for n, v in snap.nodes.items() if all(v.labels.get(k) == x for k, x in sel.items())
        ]
        if not nodes:
            raise PolicyError(422, "node_selector", f"node_selector {sel} matches no node")
    elif spec.node_spec is not None:
        try:
            want = resources.amounts(spec.node_spec)
        except resources.InvalidResource as e:
            raise PolicyError(422, "node_spec", f"node_spec: {e}") from e
        nodes = [
            n for n, v in snap.nodes.items() if all(v.available(r) >= q for r, q in want.items())
        ]
        if not nodes:
            raise PolicyError(
                422, "node_spec", f"node_spec {spec.node_spec} matches no node's available"
            )
    else:
        nodes = list(snap.nodes)
        if not nodes:
            raise PolicyError(422, "node", "no nodes are known yet")
    # num_nodes keeps nodes that already have the resource first, so a resize is stable.
    nodes.sort(key=lambda n: (resource not in snap.nodes[n].ephemeral, n))
    return nodes[: spec.num_nodes] if spec.num_nodes else nodes


def set_resource(
    ledger: Ledger, domain: str, name: str, spec: ResourceSpec, learn: bool = False
) -> tuple[str, dict[str, int], int]:
    """Apply `spec` to resource `name`; returns (full name, {node: capacity}, version).

    Every refusal is a PolicyError carrying its HTTP status and field; nothing is applied.
    """
    try:
        full = resources.full_name(domain, name)
    except resources.InvalidResource as e:
        raise PolicyError(422, "name", str(e)) from e
    nodes = target_nodes(ledger, full, spec, learn)
    capacity = dict.fromkeys(nodes, spec.capacity)
    try:
        version = ledger.set_capacity(full, capacity)
    except UnknownNode as e:
        raise PolicyError(404, "node", str(e)) from e
    except BelowAllocated as e:
        raise PolicyError(409, "capacity", str(e)) from e
    except LedgerError as e:
        raise PolicyError(422, "name", str(e)) from e
    return full, capacity, version


def resource_state(snap: Snapshot, full: str) -> ResourceState:
    return ResourceState(
        resource=full,
        nodes={
            n: _usage(v.ephemeral[full], v.used.get(full, 0))
            for n, v in snap.nodes.items()
            if full in v.ephemeral
        },
    )


def cluster_state(snap: Snapshot) -> ClusterState:
    """ESCHER's get_cluster_state: per node, capacity/allocated/available of every resource."""
    nodes: dict[str, dict[str, Usage]] = {}
    for name, v in snap.nodes.items():
        entry = {r: _usage(cap, v.used.get(r, 0)) for r, cap in v.physical.items()}
        entry.update({r: _usage(cap, v.used.get(r, 0)) for r, cap in v.ephemeral.items()})
        nodes[name] = entry
    return ClusterState(version=snap.version, nodes=nodes)


def _usage(capacity: int, allocated: int) -> Usage:
    return Usage(capacity=capacity, allocated=allocated, available=max(0, capacity - allocated))
