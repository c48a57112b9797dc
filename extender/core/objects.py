"""The fields of Kubernetes objects the extender reads, as msgspec structs.

One model for every way a Pod or a Node reaches the extender: kube-scheduler's extender calls
(extender.wire), the cluster view's list and watch (extender.cluster.view), and tests. Only the
fields some decision reads are declared; msgspec skips every other field while decoding,
which is what makes a 5,000-node request cheap to read. Names and shapes are Kubernetes'
own JSON (camelCase, quantities as strings), so a value of the wrong JSON type is refused
while decoding, with the path of the field in the error.

Structs are frozen (a decoded object is never mutated) and not tracked by the garbage
collector (they hold no reference cycles). `msgspec.Raw` fields keep a sub-tree undecoded:
the extender only needs to know whether it is there (constraints it cannot evaluate itself).
Pure data, no I/O; used by the core, the plugins, the gang feature, the wire and the
Kubernetes sides.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from msgspec import Raw, Struct, field

# Kubernetes serialises every resource.Quantity as a JSON string.
ResourceList = dict[str, str]


class _Object(Struct, rename="camel", frozen=True, gc=False, omit_defaults=True):
    """Kubernetes JSON: camelCase keys; unknown keys are skipped."""


def present(raw: Raw) -> bool:
    """Whether an undecoded field was given (absent and null both count as absent)."""
    return bytes(raw) not in (b"", b"null")


# ---- metadata --------------------------------------------------------------------------


class OwnerReference(_Object, frozen=True):
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None


class ObjectMeta(_Object, frozen=True):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    deletion_timestamp: str | None = None
    owner_references: tuple[OwnerReference, ...] = ()


# ---- pods ------------------------------------------------------------------------------


class ResourceRequirements(_Object, frozen=True):
    requests: ResourceList = {}
    limits: ResourceList = {}


class ContainerPort(_Object, frozen=True):
    container_port: int = 0
    host_port: int | None = None
    protocol: str = "TCP"


class Container(_Object, frozen=True):
    name: str = ""
    resources: ResourceRequirements = field(default_factory=ResourceRequirements)
    # On init containers, "Always" makes a restartable init container (a sidecar).
    restart_policy: str | None = None
    ports: tuple[ContainerPort, ...] = ()


class NodeSelectorRequirement(_Object, frozen=True):
    key: str = ""
    operator: str = ""
    values: tuple[str, ...] = ()


class NodeSelectorTerm(_Object, frozen=True):
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


class NodeSelector(_Object, frozen=True):
    node_selector_terms: tuple[NodeSelectorTerm, ...] = ()


class NodeAffinity(_Object, frozen=True):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    # Preferences only score: kube-scheduler weighs them itself.
    preferred_during_scheduling_ignored_during_execution: Raw = field(default_factory=Raw)


class Affinity(_Object, frozen=True):
    node_affinity: NodeAffinity | None = None
    # Evaluated by kube-scheduler only: the extender needs to know that they are there.
    pod_affinity: Raw = field(default_factory=Raw)
    pod_anti_affinity: Raw = field(default_factory=Raw)


class Toleration(_Object, frozen=True):
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


class Volume(_Object, frozen=True):
    name: str = ""
    # The kinds that bind a pod to where their volume is (evaluated by kube-scheduler only);
    # configMap, secret, emptyDir, projected and the like do not constrain nodes.
    persistent_volume_claim: Raw = field(default_factory=Raw)
    ephemeral: Raw = field(default_factory=Raw)


class PodSchedulingGate(_Object, frozen=True):
    name: str = ""


class PodSchedulingGroup(_Object, frozen=True):
    # The native PodGroup (scheduling.k8s.io/v1beta1) the pod belongs to (Kubernetes 1.37,
    # gate GenericWorkload; extender.gang.declarations).
    pod_group_name: str | None = None


class PodSpec(_Object, frozen=True):
    containers: tuple[Container, ...] = ()
    init_containers: tuple[Container, ...] = ()
    overhead: ResourceList = {}
    # Pod-level resources (KEP-2837): when set, they bound the pod's requests.
    resources: ResourceRequirements | None = None
    node_selector: dict[str, str] = {}
    affinity: Affinity | None = None
    tolerations: tuple[Toleration, ...] = ()
    node_name: str = ""
    scheduler_name: str = ""
    priority: int | None = None
    priority_class_name: str = ""
    preemption_policy: str | None = None
    # Evaluated by kube-scheduler only (see Affinity).
    topology_spread_constraints: Raw = field(default_factory=Raw)
    volumes: tuple[Volume, ...] = ()
    resource_claims: Raw = field(default_factory=Raw)
    # While any is there kube-scheduler does not try the pod; the gang manager lifts its own.
    scheduling_gates: tuple[PodSchedulingGate, ...] = ()
    scheduling_group: PodSchedulingGroup | None = None


class PodStatus(_Object, frozen=True):
    phase: str = ""
    nominated_node_name: str = ""


class Pod(_Object, frozen=True):
    metadata: ObjectMeta = field(default_factory=ObjectMeta)
    spec: PodSpec = field(default_factory=PodSpec)
    status: PodStatus = field(default_factory=PodStatus)


# ---- nodes -----------------------------------------------------------------------------


class Taint(_Object, frozen=True):
    key: str = ""
    value: str = ""
    effect: str = ""


class NodeSpec(_Object, frozen=True):
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()


class NodeStatus(_Object, frozen=True):
    capacity: ResourceList = {}
    allocatable: ResourceList = {}


class Node(_Object, frozen=True):
    metadata: ObjectMeta = field(default_factory=ObjectMeta)
    spec: NodeSpec = field(default_factory=NodeSpec)
    status: NodeStatus = field(default_factory=NodeStatus)


# ---- lists -----------------------------------------------------------------------------

T = TypeVar("T")


class ListMeta(Struct, frozen=True, gc=False):
    resourceVersion: str = ""
    continue_: str = field(default="", name="continue")


class ObjectList(Struct, Generic[T], frozen=True, gc=False):
    """A page of a list (NodeList, PodList): decode as ObjectList[Node] and so on."""

    metadata: ListMeta = field(default_factory=ListMeta)
    items: tuple[T, ...] = ()
