"""The policy objects as the API server keeps them: EphemeralResource and ESL, v1alpha1.

Their wire shapes (msgspec structs of the fields the reconcilers read), the bodies the
reconcilers write (objects, status, conditions) and the rules that tie an object to the
policy API's names. The schemas themselves are deploy/crds/. Pure: no I/O. Used by the
reconcilers and the object store of this package.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from typing import Any

import msgspec
from pydantic import ValidationError

from extender.core.errors import InvalidValue
from extender.core.ledger import Ledger
from extender.core.objects import ObjectMeta
from extender.policies.api import ResourceSpec

VERSION = "v1alpha1"
RESOURCE_KIND = "EphemeralResource"
ESL_KIND = "ESL"
# An object name the CRD accepts (a resource name as a DNS subdomain, at most 63).
_OBJECT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def group_path(domain: str, plural: str) -> str:
    return f"/apis/{domain}/{VERSION}/{plural}"


def finalizer(domain: str) -> str:
    """Held on an object until what it made is gone from the ledger and the nodes."""
    return f"{domain}/teardown"


def check_object_name(name: str) -> str:
    """Policies kept as objects: a resource's name is its object's name, so it must be one."""
    if len(name) > 63 or not _OBJECT_NAME.match(name):
        raise InvalidValue(
            f"resource name {name[:64]!r} cannot name an EphemeralResource object: with "
            "policy_objects it must be 1-63 characters of [a-z0-9-.], starting and ending "
            "with a letter or digit",
            "name",
        )
    return name


# ---- what the reconcilers read ------------------------------------------------------------


class _Struct(msgspec.Struct, rename="camel", omit_defaults=True):
    pass


class PolicyMeta(ObjectMeta, frozen=True):
    """ObjectMeta and what only the policy objects' reconcilers read (kept out of the pods'
    and nodes' decoding, which is on the verbs' path)."""

    generation: int = 0
    finalizers: list[str] = msgspec.field(default_factory=list)


class Condition(_Struct):
    type: str = ""
    status: str = ""
    reason: str = ""
    message: str = ""
    observed_generation: int = 0
    last_transition_time: str = ""


class ResourceObjectSpec(_Struct):
    capacity: int = 0
    node: str | None = None
    node_selector: dict[str, str] | None = None
    node_spec: dict[str, str | int] | None = None
    num_nodes: int | None = None


class ResourceObjectStatus(_Struct):
    observed_generation: int = 0
    conditions: list[Condition] = []


class ResourceObject(_Struct):
    metadata: PolicyMeta = msgspec.field(default_factory=PolicyMeta)
    spec: ResourceObjectSpec = msgspec.field(default_factory=ResourceObjectSpec)
    status: ResourceObjectStatus = msgspec.field(default_factory=ResourceObjectStatus)


class ESLObjectSpec(_Struct):
    kind: str = ""
    params: Any = None


class ESLObjectStatus(_Struct):
    observed_generation: int = 0
    state: dict[str, Any] | None = None
    conditions: list[Condition] = []


class ESLObject(_Struct):
    metadata: PolicyMeta = msgspec.field(default_factory=PolicyMeta)
    spec: ESLObjectSpec = msgspec.field(default_factory=ESLObjectSpec)
    status: ESLObjectStatus = msgspec.field(default_factory=ESLObjectStatus)


def condition_true(conditions: list[Condition], type_: str, generation: int) -> bool:
    return any(
        c.type == type_ and c.status == "True" and c.observed_generation == generation
        for c in conditions
    )


def esl_owner(obj: ResourceObject) -> str | None:
    """The ESL that controls this resource object, if one does."""
    for ref in obj.metadata.owner_references:
        if ref.kind == ESL_KIND and ref.controller:
            return ref.name
    return None


def older(a: str, b: str) -> bool:
    """Whether resourceVersion `a` is older than `b`. Opaque to clients in principle; etcd's
    are integers, and where they are not, the later event wins."""
    try:
        return int(a) < int(b)
    except ValueError:
        return True


# ---- specs ----------------------------------------------------------------------------------


def resource_spec(obj: ResourceObject) -> ResourceSpec:
    """The object's spec as PUT /v1/resources takes it; InvalidValue naming the field."""
    s = obj.spec
    try:
        return ResourceSpec(
            capacity=s.capacity,
            node=s.node,
            node_selector=s.node_selector,
            node_spec=s.node_spec,
            num_nodes=s.num_nodes,
        )
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        field = "spec." + ".".join(str(p) for p in err["loc"]) if err["loc"] else "spec"
        raise InvalidValue(f"{field}: {err['msg']}", field) from None


def spec_body(spec: ResourceSpec) -> dict[str, Any]:
    """The object's spec, every field present (null removes it in a merge patch)."""
    return {
        "capacity": spec.capacity,
        "node": spec.node,
        "nodeSelector": spec.node_selector,
        "nodeSpec": spec.node_spec,
        "numNodes": spec.num_nodes,
    }


def resource_object(
    domain: str, name: str, spec: ResourceSpec, owner: ESLObject | None = None
) -> dict[str, Any]:
    """A new EphemeralResource. One an ESL owns has no finalizer: the ESL removes it."""
    meta: dict[str, Any] = {"name": name}
    if owner is None:
        meta["finalizers"] = [finalizer(domain)]
    else:
        meta["labels"] = {f"{domain}/esl": owner.metadata.name}
        meta["ownerReferences"] = [
            {
                "apiVersion": f"{domain}/{VERSION}",
                "kind": ESL_KIND,
                "name": owner.metadata.name,
                "uid": owner.metadata.uid,
                "controller": True,
            }
        ]
    body = {k: v for k, v in spec_body(spec).items() if v is not None}
    return {
        "apiVersion": f"{domain}/{VERSION}",
        "kind": RESOURCE_KIND,
        "metadata": meta,
        "spec": body,
    }


def esl_object(domain: str, name: str, kind: str, params: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{domain}/{VERSION}",
        "kind": ESL_KIND,
        "metadata": {"name": name, "finalizers": [finalizer(domain)]},
        "spec": {"kind": kind, "params": params},
    }


# ---- status ---------------------------------------------------------------------------------


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def conditions(
    old: list[Condition], generation: int, new: Mapping[str, tuple[bool, str, str]]
) -> list[dict[str, Any]]:
    """`new` {type: (status, reason, message)} as conditions; a condition whose status did
    not change keeps its lastTransitionTime (as metav1.Condition does)."""
    before = {c.type: c for c in old}
    out = []
    for type_, (ok, reason, message) in new.items():
        status = "True" if ok else "False"
        prev = before.get(type_)
        since = prev.last_transition_time if prev and prev.status == status else ""
        out.append(
            {
                "type": type_,
                "status": status,
                "reason": reason,
                "message": message[:32768],
                "observedGeneration": generation,
                "lastTransitionTime": since or _now(),
            }
        )
    return out


def usage(ledger: Ledger, full: str) -> dict[str, dict[str, int]]:
    """Per node that has `full`: capacity, allocated, available (O(those nodes))."""
    out = {}
    for n in sorted(dict(ledger.nodes_with(full))):  # a copy in C: changes go on meanwhile
        v = ledger.node(n)
        cap = v.ephemeral.get(full, 0) if v is not None else 0
        if cap:
            held = v.used.get(full, 0) if v is not None else 0
            out[n] = {"capacity": cap, "allocated": held, "available": max(0, cap - held)}
    return out


# Per-node usage is listed in the status up to this many nodes. Past it the status keeps
# the totals alone: every status write costs the API server (and every watcher) the whole
# object, and a usage refresh every resync of a 5,000-node listing cost kube-apiserver about
# 0.4 s of CPU each (more than 1 ms a pod placed). The nodes hold the capacities anyway.
STATUS_NODES_MAX = 100


def resource_status(
    generation: int, nodes: dict[str, dict[str, int]], conds: list[dict[str, Any]]
) -> dict[str, Any]:
    capacity = sum(u["capacity"] for u in nodes.values())
    allocated = sum(u["allocated"] for u in nodes.values())
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "nodeCount": len(nodes),
        "capacity": capacity,
        "allocated": allocated,
        "available": sum(u["available"] for u in nodes.values()),
        "nodesListed": len(nodes) <= STATUS_NODES_MAX,
    }
    if status["nodesListed"]:
        status["nodes"] = nodes
    status["conditions"] = conds
    return status
