"""Gangs declared as Kubernetes objects: the PodGroups users already write, held in memory.

Two kinds of object declare a gang besides the extender's own labels and annotations
(extender.gang.spec reads all of them together):

- the native `scheduling.k8s.io/v1beta1` PodGroup (Kubernetes 1.37, gate GenericWorkload),
  which a pod names in `spec.schedulingGroup.podGroupName`: `spec.schedulingPolicy.gang.
  minCount` (the `basic` policy declares no gang) and `spec.schedulingConstraints.topology[0].
  key` (a node label all members must share one value of: a required topology level);
- scheduler-plugins' `scheduling.x-k8s.io/v1alpha1` PodGroup (a CRD), which a pod names with
  the label `scheduling.x-k8s.io/pod-group`: `spec.minMember` and `spec.scheduleTimeoutSeconds`.

`Declarations` is the index the gang manager reads through the `Groups` protocol: filled by
the gang's Kubernetes side (extender.gang.kube.podgroups, its informers), which calls `put`,
`remove` and `listed`. It also follows the pods that name a group (subscribed to the cluster
view's pod events), so that when a group appears, changes or goes, its members are handed
back to the gang manager (`on_change`, wired by extender.service to GangManager.redeclared)
and a gang waiting for its declaration is planned again. Runs on the event loop only; pure,
no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from extender.core.events import PodChange, PodEvent
from extender.core.pod import COSCHEDULING_LABEL, PodInfo


class GroupKind(StrEnum):
    """The kinds of group object, named as `kubectl get` names them (resource.group)."""

    NATIVE = "podgroups.scheduling.k8s.io"
    COSCHEDULING = "podgroups.scheduling.x-k8s.io"


@dataclass(frozen=True, slots=True)
class GroupRef:
    kind: GroupKind
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class GroupDeclaration:
    """What one group object declares, as written (extender.gang.spec checks the ranges, so
    that a bad value is reported on the pods rather than dropped here)."""

    # The gang's minimum; None: the object declares no gang (the native `basic` policy).
    min_members: int | None
    timeout: float | None = None  # seconds (scheduler-plugins' scheduleTimeoutSeconds)
    required_key: str | None = None  # a node-label key (the native topology constraint)


class Groups(Protocol):
    """Read-only: the declaration of a group object, None when no such object is known."""

    def get(self, ref: GroupRef) -> GroupDeclaration | None: ...


class _NoGroups:
    def get(self, ref: GroupRef) -> GroupDeclaration | None:
        return None


NO_GROUPS: Groups = _NoGroups()


def refs_of(pod: PodInfo) -> tuple[GroupRef, ...]:
    """The group objects `pod` names (none, one, or one of each kind)."""
    out: list[GroupRef] = []
    if pod.group:
        out.append(GroupRef(GroupKind.NATIVE, pod.namespace, pod.group))
    pg = pod.marks.get(COSCHEDULING_LABEL)
    if pg:
        out.append(GroupRef(GroupKind.COSCHEDULING, pod.namespace, pg))
    return tuple(out)


class Declarations:
    """The in-memory index of group objects, and the pods that name each one."""

    def __init__(self, on_change: Callable[[list[PodInfo]], None] | None = None) -> None:
        self._groups: dict[GroupRef, GroupDeclaration] = {}
        # The pods naming each group, known or not: a group that comes later must find them.
        # Bounded by the pods the cluster view reports; a pod leaves when it is gone.
        self._naming: dict[GroupRef, dict[str, PodInfo]] = {}
        self._refs: dict[str, tuple[GroupRef, ...]] = {}  # uid -> the groups it names
        self.on_change = on_change

    # ---- Groups ----------------------------------------------------------------------------

    def get(self, ref: GroupRef) -> GroupDeclaration | None:
        return self._groups.get(ref)

    def __len__(self) -> int:
        return len(self._groups)

    # ---- the informers' feed ---------------------------------------------------------------

    def put(self, ref: GroupRef, declaration: GroupDeclaration) -> None:
        """A group object was added or changed."""
        if self._groups.get(ref) != declaration:  # a status update changes nothing here
            self._groups[ref] = declaration
            self._changed(ref)

    def remove(self, ref: GroupRef) -> None:
        """A group object was deleted."""
        if self._groups.pop(ref, None) is not None:
            self._changed(ref)

    def listed(self, kind: GroupKind, present: Collection[GroupRef]) -> None:
        """After a full list of `kind`: forget the objects of that kind not in `present`
        (deleted while nobody watched)."""
        keep = set(present)
        for ref in [r for r in self._groups if r.kind is kind and r not in keep]:
            self.remove(ref)

    def replace(self, kind: GroupKind, groups: Mapping[GroupRef, GroupDeclaration]) -> None:
        """Make the objects of `kind` exactly `groups` (a list, or {} when the API is not
        served)."""
        for ref, declaration in groups.items():
            self.put(ref, declaration)
        self.listed(kind, groups.keys())

    # ---- the pods naming groups ------------------------------------------------------------

    def on_pod(self, event: PodEvent) -> None:
        """Follow which pods name which group (subscribed to the cluster view's events)."""
        uid, pod = event.uid, event.pod
        old = self._refs.pop(uid, ())
        for ref in old:
            members = self._naming.get(ref)
            if members is not None:
                members.pop(uid, None)
                if not members:
                    del self._naming[ref]
        if event.change is PodChange.GONE or pod is None or pod.terminating or pod.done:
            return
        refs = refs_of(pod)
        if refs:
            self._refs[uid] = refs
            for ref in refs:
                self._naming.setdefault(ref, {})[uid] = pod

    def naming(self, ref: GroupRef) -> list[PodInfo]:
        """The pods (not finished, not terminating) that name `ref`."""
        return list(self._naming.get(ref, {}).values())

    def _changed(self, ref: GroupRef) -> None:
        pods = self.naming(ref)
        if pods and self.on_change is not None:
            self.on_change(pods)
