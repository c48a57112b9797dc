"""Where a pod may run, as far as the extender can tell: node selector, required node
affinity, taints and tolerations, unschedulable nodes.

kube-scheduler checks these itself for the node it picks; the extender needs them when it
plans a place for every member of a gang at once (extender.gang.plan), before kube-scheduler
has looked at most of them. The rules are those of k8s.io/component-helpers
(scheduling/corev1/nodeaffinity and the taint helpers) and of the NodeUnschedulable plugin.
What only kube-scheduler can evaluate (pod affinity, topology spread, host ports, volumes
bound to nodes, resource claims) is reported in `unevaluable`, so the planner can fall back
to the nodes kube-scheduler itself found feasible and never reserve a forbidden one.
Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from msgspec import Struct

from extender.core.ledger import NodeView
from extender.core.objects import (
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodSpec,
    Taint,
    Toleration,
    present,
)

UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")
_HARD_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


class Constraints(Struct, frozen=True, gc=False):
    """Where a pod may run, as far as the extender can tell. Not tracked by the garbage
    collector, as the decoded objects it keeps are not (a gang member's PodInfo holds one)."""

    node_selector: Mapping[str, str]
    # None: no required node affinity; otherwise the terms, one of which must match.
    terms: tuple[NodeSelectorTerm, ...] | None
    tolerations: tuple[Toleration, ...]
    # Why kube-scheduler alone can say where the pod may run ("" when the extender can).
    unevaluable: str

    def check(self, node: NodeView) -> str:
        """Why `node` is forbidden to the pod, or "" when it is allowed."""
        for key, value in self.node_selector.items():
            if node.labels.get(key) != value:
                return "node(s) didn't match Pod's node affinity/selector"
        if self.terms is not None and not any(_term(t, node) for t in self.terms):
            return "node(s) didn't match Pod's node affinity/selector"
        for taint in node.taints:
            if taint.effect in _HARD_EFFECTS and not tolerates(self.tolerations, taint):
                return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
        if node.unschedulable and not tolerates(self.tolerations, UNSCHEDULABLE_TAINT):
            return "node(s) were unschedulable"
        return ""


def constraints_of(spec: PodSpec) -> Constraints:
    affinity = spec.affinity
    required = affinity.node_affinity if affinity is not None else None
    selector = (
        required.required_during_scheduling_ignored_during_execution
        if required is not None
        else None
    )
    return Constraints(
        node_selector=spec.node_selector,
        terms=tuple(selector.node_selector_terms) if selector is not None else None,
        tolerations=tuple(spec.tolerations),
        unevaluable=_unevaluable(spec),
    )


def _unevaluable(spec: PodSpec) -> str:
    why = []
    if spec.affinity is not None and (
        present(spec.affinity.pod_affinity) or present(spec.affinity.pod_anti_affinity)
    ):
        why.append("pod affinity")
    if present(spec.topology_spread_constraints):
        why.append("topology spread constraints")
    if any(p.host_port for c in spec.containers for p in c.ports):
        why.append("host ports")
    if any(present(v.persistent_volume_claim) or present(v.ephemeral) for v in spec.volumes):
        why.append("volumes bound to nodes")
    if present(spec.resource_claims):
        why.append("resource claims")
    return ", ".join(why)


def tolerates(tolerations: tuple[Toleration, ...], taint: Taint) -> bool:
    return any(_tolerates(t, taint) for t in tolerations)


def _tolerates(t: Toleration, taint: Taint) -> bool:
    if t.effect and t.effect != taint.effect:
        return False
    if t.key and t.key != taint.key:
        return False
    if t.operator in ("", "Equal"):
        return t.value == taint.value
    return t.operator == "Exists"


def _term(term: NodeSelectorTerm, node: NodeView) -> bool:
    # A term with no requirement selects no node (nodeaffinity.nodeSelectorTerms).
    if not term.match_expressions and not term.match_fields:
        return False
    fields = {"metadata.name": node.name}
    return all(_requirement(r, node.labels) for r in term.match_expressions) and all(
        r.key == "metadata.name" and r.operator in ("In", "NotIn") and _requirement(r, fields)
        for r in term.match_fields
    )


def _requirement(r: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    value = labels.get(r.key)
    op = r.operator
    if op == "In":
        return value is not None and value in r.values
    if op == "NotIn":
        return value is None or value not in r.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(r.values) == 1:
        try:
            have, bound = int(value), int(r.values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False  # an invalid requirement selects nothing, as in nodeaffinity
