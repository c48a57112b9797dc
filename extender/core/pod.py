"""PodInfo: what the extender's decisions read of a pod, computed once per pod.

Built from the decoded Pod (extender.core.objects) wherever a pod enters: kube-scheduler's
filter, prioritize and preempt calls (extender.scheduling.verbs) and the cluster view's pod events
(extender.cluster.view). It keeps only what some decision reads, so a cache of them is
bounded by the number of pods and not by what a pod's metadata carries: the requests in the
ledger's units (extender.core.podrequests), the few labels and annotations the extender
defines (`Keys`; the marker resources are left out of the requests), and, for gang members, the
constraints planning needs. Rejection is the other half of a decision: why a node cannot take
the pod. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from msgspec import Struct

from extender.core.constraints import Constraints, constraints_of
from extender.core.errors import InvalidValue
from extender.core.objects import Pod
from extender.core.podrequests import pod_requests

# scheduler-plugins' label naming a pod's PodGroup: accepted as a gang name too, so pods
# written for Coscheduling are gangs here without relabelling.
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
# A value of one of the extender's own keys longer than this is refused: nothing legitimate
# needs more (a prefer list of alternatives, a gang name), and caches stay small.
MAX_VALUE = 4096
_DONE = frozenset({"Succeeded", "Failed"})


# What the write-back advertises of each marker on every node in extender mode. kube-scheduler's
# NodeResourcesFit ignores the markers when it filters (ignoredByScheduler), but its queueing
# hint does not: it requeues a pod on a node update only if the pod fits that node, markers
# counted, so a marked pod waiting for an ephemeral resource would wait for the 5-minute flush
# of the unschedulable queue if no node had its marker. More than any node's pods.
MARKER_CAPACITY = 1_000_000


@dataclass(frozen=True, slots=True)
class Keys:
    """The label, annotation and resource names the extender defines, under the domain."""

    gang: str  # label: the gang's name
    gang_min: str  # annotation: the gang's minimum members
    gang_timeout: str  # annotation: seconds a gang may stay reserved but incomplete
    # annotations: a topology level (its name or node-label key, extender.gang.topology)
    # every member must share one domain of, or whose domains the gang should span fewest of
    gang_required_topology: str
    gang_preferred_topology: str
    prefer: str  # annotation: ordered soft alternatives (extender.filters.preference)
    pack: str  # annotation: bin-pack on this resource
    # The marker resources, one per extender entry of kube-scheduler's configuration (its
    # managedResources, ignored by NodeResourcesFit): only pods requesting a marker get that
    # entry's verbs. deploy/'s admission policies add them: `gang_marker` (filter and preempt)
    # and `bind_marker` (bind: the barrier) to gang members, `score_marker` (prioritize) to
    # pods stating a preference. Other pods, ephemeral requests included, are
    # kube-scheduler's alone, as in pure mode. Bind has an entry of its own because a member
    # waits at the barrier until its gang is whole, which for a large gang is far longer than
    # a filter may take: the two entries' httpTimeouts differ (kube-scheduler refuses one
    # marker in two entries). A marker occupies nothing, and it is outside the domain's
    # prefix, so it is never taken for an ephemeral resource.
    gang_marker: str
    bind_marker: str
    score_marker: str
    # The scheduling gate a gang member may be created behind (deploy/'s gang-gate policy
    # adds it): kube-scheduler leaves the pod alone until the gang manager lifts it.
    gate: str

    @classmethod
    def for_domain(cls, domain: str) -> Keys:
        return cls(
            gang=f"{domain}/gang",
            gang_min=f"{domain}/gang-min",
            gang_timeout=f"{domain}/gang-timeout",
            gang_required_topology=f"{domain}/gang-required-topology",
            gang_preferred_topology=f"{domain}/gang-preferred-topology",
            prefer=f"{domain}/prefer",
            pack=f"{domain}/pack",
            gang_marker=f"scheduling.{domain}/gang",
            bind_marker=f"scheduling.{domain}/bind",
            score_marker=f"scheduling.{domain}/score",
            gate=f"{domain}/gang",
        )

    def labels(self) -> tuple[str, ...]:
        return (self.gang, COSCHEDULING_LABEL)

    def annotations(self) -> tuple[str, ...]:
        return (
            self.gang_min,
            self.gang_timeout,
            self.gang_required_topology,
            self.gang_preferred_topology,
            self.prefer,
            self.pack,
        )

    @property
    def markers(self) -> tuple[str, ...]:
        return (self.gang_marker, self.bind_marker, self.score_marker)


class PodInfo(Struct, frozen=True, gc=False):
    """Not tracked by the garbage collector: the informer keeps one per pod (thousands at
    scale, all long-lived) and it refers only to strings, numbers, dicts of them and its
    Constraints (untracked too), so no reference cycle runs through it."""

    uid: str
    namespace: str
    name: str
    # Everything the pod occupies, in the ledger's units, and the ephemeral subset of it.
    requests: Mapping[str, int]
    ephemeral: Mapping[str, int]
    # Only the extender's own keys (Keys), the labels and annotations merged.
    marks: Mapping[str, str]
    gang: str  # the gang's name, "" for a pod of no gang
    priority: int
    node: str  # spec.nodeName: "" while pending
    done: bool  # Succeeded or Failed: holds nothing any more
    terminating: bool
    # Carries the gang gate (Keys.gate): kube-scheduler will not try it until it is lifted.
    held: bool
    # Where the pod may run, for gang members only (planning reads it); None otherwise.
    constraints: Constraints | None
    # The native PodGroup it names (spec.schedulingGroup.podGroupName), "" if none.
    group: str = ""
    # status.nominatedNodeName: where kube-scheduler will try it first ("" if nowhere).
    nominated: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a node cannot take the pod. `unresolvable`: preemption could not help."""

    reason: str
    unresolvable: bool = False


def pod_info(pod: Pod, keys: Keys, prefix: str) -> PodInfo:
    """The PodInfo of a decoded pod. Raises InvalidQuantity or InvalidValue naming the field
    (relative to the pod: `spec.containers[0]...`, `metadata.annotations[...]`)."""
    meta, spec = pod.metadata, pod.spec
    requests = pod_requests(spec)
    for marker in keys.markers:
        requests.pop(marker, None)
    marks: dict[str, str] = {}
    for source, names, where in (
        (meta.labels, keys.labels(), "labels"),
        (meta.annotations, keys.annotations(), "annotations"),
    ):
        for k in names:
            v = source.get(k)
            if v is not None:
                if len(v) > MAX_VALUE:
                    raise InvalidValue(
                        f"metadata.{where}[{k}] is longer than {MAX_VALUE} characters",
                        f"metadata.{where}[{k}]",
                    )
                marks[k] = v
    sg = spec.scheduling_group
    group = (sg.pod_group_name if sg is not None else None) or ""
    if len(group) > MAX_VALUE:
        raise InvalidValue(
            f"spec.schedulingGroup.podGroupName is longer than {MAX_VALUE} characters",
            "spec.schedulingGroup.podGroupName",
        )
    # Any of the three names makes the pod a gang member; when they disagree,
    # extender.gang.spec refuses it with a reason naming both.
    gang = marks.get(keys.gang) or marks.get(COSCHEDULING_LABEL) or group
    return PodInfo(
        uid=meta.uid,
        namespace=meta.namespace or "default",
        name=meta.name,
        requests=requests,
        ephemeral={r: v for r, v in requests.items() if r.startswith(prefix)},
        marks=marks,
        gang=gang,
        group=group,
        priority=spec.priority or 0,
        node=spec.node_name,
        done=pod.status.phase in _DONE,
        terminating=meta.deletion_timestamp is not None,
        held=any(g.name == keys.gate for g in spec.scheduling_gates),
        constraints=constraints_of(spec) if gang else None,
        nominated=pod.status.nominated_node_name,
    )
