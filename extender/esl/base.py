"""The ESL protocol, the Backend protocol ESLs run on, and what every ESL shares.

An ESL (ESCHER Scheduling Library) turns an intent ("co-locate these", "spread these")
into ephemeral resources and tells the application what its pods must request; application
code never handles resource names. ESLs only use a Backend: ESCHER's `set_resource` and
`get_cluster_state`, whichever approach is behind them (extender.esl.backends):

- the extender approach: the extender's ledger, through its policy API (ExtenderBackend) or
  in-process inside the service (LedgerBackend, for the /v1/esl endpoints);
- the pure approach: Node objects patched directly, kube-scheduler alone decides
  (NodeBackend).

Lifecycle: construct with a Backend and validated parameters (`parse_params` turns a raw
mapping into them, raising InvalidParameters naming the field), `apply()` creates the
resources, pods are created with `requests_for(key)`, `teardown()` removes every resource the
instance created. Policies that react over time also have `step()` (Dynamic): it reads the
cluster state once and adjusts; the application calls it, or, for instances created over
HTTP, the service's step loop (extender.esl.registry.Instances.step_all) does, every second.

Used by the ESL modules of this package, the registry and HTTP routes, and applications.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Generic, Protocol, TypeVar, runtime_checkable

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    model_validator,
)

from extender.core import quantity
from extender.core.names import CPU, MEMORY
from extender.esl.errors import InvalidParameters, UnknownKey, Unsatisfiable
from extender.gang.topology import Hierarchy
from extender.policies.api import ClusterState, ResourceSpec

# Resource names are <prefix>-<name>[-<key>]: short enough to stay within Kubernetes' 63.
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
NAME_MAX = 30
KEY_MAX = 20
# Keys (groups, queues, users, stages) and parts per instance: each is a resource, and
# sharing among them costs up to keys^2.
MAX_KEYS = 1000
# "Unbounded" capacity (bin-packing, data locality's default slots, soft alternatives): far
# above what a node can run, still a valid extended-resource quantity. A backend says its own
# (Backend.unbounded): in mode dra every unit is a device, and this many would be 782
# ResourceSlices per node, so there it is UNBOUNDED_DRA.
UNBOUNDED = 100_000
# One ResourceSlice's worth of devices (128): above kubelet's default max-pods (110), and each
# ESL pod asks one unit, so it is never the limit on a node that runs at most that many pods.
UNBOUNDED_DRA = 128


def _check_name(kind: str, limit: int) -> Any:
    def check(v: str) -> str:
        if len(v) > limit or not _NAME.match(v):
            raise ValueError(
                f"{kind} {v!r} must be 1-{limit} characters of [a-z0-9-], "
                "starting and ending with a letter or digit"
            )
        return v

    return AfterValidator(check)


def _quantity(resource: str) -> Any:
    def check(v: str) -> str:
        try:
            if quantity.amount(resource, v, field=resource) <= 0:
                raise ValueError(f"{resource} must be > 0, not {v!r}")
        except quantity.InvalidQuantity as e:
            raise ValueError(str(e)) from None
        return v

    return AfterValidator(check)


Cpu = Annotated[str, _quantity(CPU)]
Memory = Annotated[str, _quantity(MEMORY)]


Name = Annotated[str, _check_name("name", NAME_MAX)]
Key = Annotated[str, _check_name("key", KEY_MAX)]
# Bounded as what they become is bounded (a capacity, a ResourceSpec's node and
# node_selector), so the ESL refuses them naming its own field, not the backend later.
Count = Annotated[StrictInt, Field(ge=1, le=UNBOUNDED)]
NodeName = Annotated[str, Field(min_length=1, max_length=253)]
NodeSelector = Annotated[dict[str, str], Field(max_length=64)]


class ESLParams(BaseModel):
    """Base of every ESL's parameters: unknown fields are refused; `name` names the
    instance and, prefixed by the ESL, its resources."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Name


class Target(BaseModel):
    """Where a resource goes: one node, the nodes with these labels, or (neither) every node."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node: NodeName | None = None
    node_selector: NodeSelector | None = None

    @model_validator(mode="after")
    def _one_place(self) -> Target:
        if self.node is not None and self.node_selector is not None:
            raise ValueError("give at most one of node, node_selector (neither: every node)")
        return self

    def spec(self, capacity: int) -> ResourceSpec:
        return ResourceSpec(capacity=capacity, node=self.node, node_selector=self.node_selector)


class PodRequest(BaseModel):
    """What a pod must carry: `limits` of its container (extended resources, and cpu/memory
    when the ESL planned with them), and labels / annotations."""

    limits: dict[str, str]
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    def merge(self, other: PodRequest) -> PodRequest:
        """AND: both vectors at once. A resource both ask for gets the larger amount; a label
        or annotation both set to different values cannot hold for one pod."""
        limits = dict(self.limits)
        for k, v in other.limits.items():
            limits[k] = v if k not in limits else _larger(limits[k], v)
        for mine, theirs, what in (
            (self.labels, other.labels, "label"),
            (self.annotations, other.annotations, "annotation"),
        ):
            for k, v in theirs.items():
                if mine.get(k, v) != v:
                    raise Unsatisfiable(f"{what} {k} is asked to be both {mine[k]!r} and {v!r}")
        return PodRequest(
            limits=limits,
            labels={**self.labels, **other.labels},
            annotations={**self.annotations, **other.annotations},
        )


def _larger(a: str, b: str) -> str:
    return a if quantity.parse(a, field="limits") >= quantity.parse(b, field="limits") else b


class Change(BaseModel):
    """One change a step made: the resource's capacity now, on the nodes it changed."""

    resource: str
    nodes: dict[str, int]
    why: str


@runtime_checkable
class Backend(Protocol):
    """ESCHER's API, as both approaches provide it (extender.esl.backends).

    `domain`: pods request <domain>/<name>. `in_path`: the extender is in kube-scheduler's
    path (extender mode), so its prioritize honours preferences (escher.io/prefer,
    escher.io/pack: soft constraints and bin-packing need no timeouts) and its gang filter
    places gangs all-or-nothing. `hierarchy`: the topology levels (extender.gang.topology) a
    gang's required / preferred topology names, the service's `settings.gang.hierarchy`.
    `unbounded`: the capacity an ESL sets for "no limit" (UNBOUNDED_DRA in mode dra). Refusals
    are the core's errors (extender.core.errors) and change nothing.
    """

    domain: str
    in_path: bool
    hierarchy: Hierarchy
    unbounded: int  # the capacity that stands for "no limit" here (UNBOUNDED, UNBOUNDED_DRA)

    def set_resource(self, name: str, spec: ResourceSpec) -> dict[str, int]:
        """Set `name`'s capacity on the nodes `spec` targets (0 removes it there); returns
        {node: capacity}."""
        ...

    def delete_resource(self, name: str) -> None:
        """Remove `name` from every node, even while pods hold it (they keep running);
        nothing to do when no node has it."""
        ...

    def cluster_state(self) -> ClusterState: ...


P = TypeVar("P", bound=ESLParams)


class ESL(Protocol):
    """What every ESL offers (extender.esl.REGISTRY lists them)."""

    NAME: ClassVar[str]
    Params: ClassVar[type[ESLParams]]

    def __init__(self, backend: Backend, params: Any) -> None: ...

    @property
    def params(self) -> ESLParams: ...

    def apply(self) -> None:
        """Create or update the resources (idempotent)."""
        ...

    def request_keys(self) -> list[str]:
        """The keys requests_for takes (groups, queues, users, stages); [""] when every pod
        requests the same."""
        ...

    def requests_for(self, key: str = "") -> PodRequest: ...

    def resources(self) -> list[str]:
        """The full names of every resource this instance created and has not removed."""
        ...

    def teardown(self) -> None: ...

    def state(self) -> dict[str, Any]:
        """What a new leader needs to resume this instance (JSON: ESL objects' status)."""
        ...

    def restore(self, state: Mapping[str, Any], where: Callable[[str], dict[str, int]]) -> None:
        """Resume from `state()`'s output; `where(short)` says where a resource is now."""
        ...


@runtime_checkable
class Dynamic(Protocol):
    """An ESL that adjusts over time: `step()` reads the cluster state and adjusts."""

    def step(self) -> list[Change]: ...


@runtime_checkable
class Signalled(Protocol):
    """An ESL the application tells of events (sequencing: a stage finished)."""

    def signal(self, key: str) -> list[Change]: ...


class BaseESL(Generic[P]):
    """The bookkeeping every ESL shares: its backend and parameters, the names of the
    resources it created (so teardown removes exactly those), and naming."""

    NAME: ClassVar[str]
    PREFIX: ClassVar[str]  # of resource names: <PREFIX>-<name>[-<key>]
    Params: ClassVar[type[ESLParams]]
    # The attributes, besides the resources it created, that a new leader restores
    # (extender.policies.kube keeps state() in the ESL object's status). Clocks are not
    # among them: a monotonic time means nothing in another process, and restarts.
    STATE: ClassVar[tuple[str, ...]] = ()

    def __init__(self, backend: Backend, params: P) -> None:
        self.backend = backend
        self.params = params
        self._created: dict[str, dict[str, int]] = {}  # short name -> {node: capacity}

    def short(self, key: str = "") -> str:
        return f"{self.PREFIX}-{self.params.name}" + (f"-{key}" if key else "")

    def full(self, key: str = "") -> str:
        return f"{self.backend.domain}/{self.short(key)}"

    def set(
        self,
        short: str,
        capacity: int,
        node: str | None = None,
        node_selector: Mapping[str, str] | None = None,
    ) -> dict[str, int]:
        """set_resource on a node, the nodes with these labels, or (neither) every node,
        remembering where the resource now is."""
        spec = ResourceSpec(
            capacity=capacity,
            node=node,
            node_selector=dict(node_selector) if node_selector is not None else None,
        )
        nodes = self.backend.set_resource(short, spec)
        where = self._created.setdefault(short, {})
        for node, cap in nodes.items():
            if cap:
                where[node] = cap
            else:
                where.pop(node, None)
        if not where:
            del self._created[short]
        return nodes

    def remove(self, short: str) -> None:
        if short in self._created:
            self.backend.delete_resource(short)
            del self._created[short]

    def where(self, short: str) -> dict[str, int]:
        """The capacity this instance set per node (empty when it does not exist)."""
        return dict(self._created.get(short, {}))

    def resources(self) -> list[str]:
        return sorted(f"{self.backend.domain}/{s}" for s in self._created)

    def teardown(self) -> None:
        for short in list(self._created):
            self.remove(short)

    def state(self) -> dict[str, Any]:
        out: dict[str, Any] = {"created": sorted(self._created)}
        for attr in self.STATE:
            value = getattr(self, attr)
            out[attr] = sorted(value) if isinstance(value, set) else value
        return out

    def restore(self, state: Mapping[str, Any], where: Callable[[str], dict[str, int]]) -> None:
        """The resources from the ledger (the nodes' truth), the rest from `state`; a value
        of another type than the attribute's (the status is anyone's to write) is ignored."""
        created = state.get("created")
        for short in created if isinstance(created, list) else []:
            if isinstance(short, str) and (nodes := where(short)):
                self._created[short] = nodes
        for attr in self.STATE:
            if attr in state:
                value = _like(getattr(self, attr), state[attr])
                if value is not None:
                    setattr(self, attr, value)

    def request_keys(self) -> list[str]:
        return [""]

    def check_key(self, key: str) -> None:
        if key not in self.request_keys():
            known = ", ".join(repr(k) for k in self.request_keys())
            raise UnknownKey(f"{self.NAME} {self.params.name} has no key {key!r} ({known})", "key")


def _like(current: Any, value: Any) -> Any:
    """`value` as the type of `current`, or None when it cannot be."""
    if isinstance(current, set):
        return {v for v in value if isinstance(v, str)} if isinstance(value, list) else None
    if isinstance(current, bool) or isinstance(value, bool):
        return None
    if isinstance(current, int | float):
        return type(current)(value) if isinstance(value, int | float) else None
    if isinstance(value, dict) and (current is None or isinstance(current, dict)):
        return {k: v for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool)}
    return None


def parse_params(cls: type[P], data: Any) -> P:
    """Validate raw parameters (a mapping, e.g. an HTTP body) into `cls`, or raise
    InvalidParameters naming the first offending field."""
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        field = ".".join(str(p) for p in err["loc"]) or None
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise InvalidParameters(f"{field}: {msg}" if field else msg, field) from e


def room(need: Mapping[str, int], have: Mapping[str, int]) -> int:
    """How many copies of `need` fit in `have` (a resource `have` lacks fits none)."""
    return min((have.get(r, 0) // v for r, v in need.items() if v > 0), default=0)


def totals(state: ClusterState, resource: str) -> tuple[int, int]:
    """(capacity, allocated) of `resource` summed over the nodes."""
    cap = alloc = 0
    for res in state.nodes.values():
        u = res.get(resource)
        if u is not None:
            cap += u.capacity
            alloc += u.allocated
    return cap, alloc


def per_node(state: ClusterState, resource: str) -> dict[str, int]:
    """How much of `resource` is allocated on each node that has it."""
    return {n: res[resource].allocated for n, res in state.nodes.items() if resource in res}
