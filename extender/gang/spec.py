"""A gang's declaration, read from its members' labels and annotations and the group objects
they name.

A pod is a member of gang `<name>` in its namespace when it says so in any of three ways,
which must agree on the name:

- the label `<domain>/gang: <name>`;
- scheduler-plugins' label `scheduling.x-k8s.io/pod-group: <name>`, naming its PodGroup;
- `spec.schedulingGroup.podGroupName: <name>`, naming a native PodGroup.

The minimum comes from the annotation `<domain>/gang-min`, the native PodGroup's
`schedulingPolicy.gang.minCount` or scheduler-plugins' `minMember`; the timeout from
`<domain>/gang-timeout` or `scheduleTimeoutSeconds` (default 60 s); the required topology
level from `<domain>/gang-required-topology` or the native `schedulingConstraints.topology`
key, and the preferred one from `<domain>/gang-preferred-topology` (a level's name or a node
label key, extender.gang.topology). Where two sources give the same field they must agree:
a disagreement is refused with a reason naming both, and nothing is reserved. A pod naming a
group object not known (yet) waits with a reason (GangPending) unless its annotations
declare everything the object would (scheduler-plugins' label with `gang-min`: a gang as
before the objects were read). docs/gangs.md tabulates what is honoured of each object.

Called by the gang manager for every member it learns of and every filter; pure, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from extender.core.pod import COSCHEDULING_LABEL, Keys, PodInfo
from extender.gang.declarations import (
    NO_GROUPS,
    GroupKind,
    GroupRef,
    Groups,
)
from extender.gang.topology import DEFAULT, Hierarchy, Level, parse

DEFAULT_TIMEOUT = 60.0
MAX_MEMBERS = 10_000  # more is a mistake, and the manager's state per gang stays bounded
MAX_TIMEOUT = 86_400.0
DEFAULT_HIERARCHY = parse(DEFAULT)

# How each group object's fields are named in reasons.
_MIN = {
    GroupKind.NATIVE: "spec.schedulingPolicy.gang.minCount",
    GroupKind.COSCHEDULING: "spec.minMember",
}
_TIMEOUT = "spec.scheduleTimeoutSeconds"
_TOPOLOGY = "spec.schedulingConstraints.topology[0].key"


class InvalidGang(ValueError):
    """A declaration that cannot be honoured; the message names the gang and the key."""


class GangPending(InvalidGang):
    """A pod names a group object that is not known yet: it waits (the object may come)."""


@dataclass(frozen=True, slots=True)
class GangSpec:
    namespace: str
    name: str
    min_members: int
    timeout: float
    # All members in one domain of this level (else the gang waits), and the level whose
    # domains the gang should span as few of as it can (best effort).
    required: Level | None = None
    preferred: Level | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def gang_spec(
    pod: PodInfo,
    keys: Keys,
    hierarchy: Hierarchy = DEFAULT_HIERARCHY,
    groups: Groups = NO_GROUPS,
) -> GangSpec | None:
    """The gang `pod` declares, None if none. Raises InvalidGang (GangPending while a group
    object it names is not known)."""
    if not pod.gang:
        return None
    name = _gang_name(pod, keys)
    key = f"{pod.namespace}/{name}"
    where_pod = f"gang {key}: pod {pod.name}"
    said = _annotations(pod, keys, where_pod)
    if not _group_objects(pod, keys, groups, where_pod, said):
        return None
    if not said.min_sources:
        raise InvalidGang(f"{where_pod} has no {keys.gang_min} annotation")
    min_members = _agreed(said.min_sources, where_pod)
    if not 1 <= min_members <= MAX_MEMBERS:
        raise InvalidGang(f"gang {key}: {said.min_sources[0][0]} must be in 1..{MAX_MEMBERS}")
    timeout = _agreed(said.timeout_sources, where_pod) if said.timeout_sources else DEFAULT_TIMEOUT
    if not 0 < timeout <= MAX_TIMEOUT:  # also refuses nan and inf
        raise InvalidGang(
            f"gang {key}: {said.timeout_sources[0][0]} must be in (0, {MAX_TIMEOUT:g}]"
        )
    required, preferred = _levels(pod, keys, said, key, where_pod, hierarchy)
    return GangSpec(pod.namespace, name, min_members, float(timeout), required, preferred)


@dataclass(slots=True)
class _Said:
    """Each source of each field: (where it is said, the value as written)."""

    min_sources: list[tuple[str, int]] = field(default_factory=list)
    timeout_sources: list[tuple[str, float]] = field(default_factory=list)
    required_sources: list[tuple[str, str]] = field(default_factory=list)


def _gang_name(pod: PodInfo, keys: Keys) -> str:
    """The gang's name, as every way the pod names it agrees (InvalidGang if not)."""
    names = [(f"label {k}", v) for k in (keys.gang, COSCHEDULING_LABEL) if (v := pod.marks.get(k))]
    if pod.group:
        names.append(("spec.schedulingGroup.podGroupName", pod.group))
    first_where, name = names[0]
    for where, other in names[1:]:
        if other != name:
            raise InvalidGang(
                f"gang conflict: pod {pod.namespace}/{pod.name}: {first_where} says {name}, "
                f"{where} says {other}"
            )
    return name


def _annotations(pod: PodInfo, keys: Keys, where_pod: str) -> _Said:
    """What the pod's own annotations say of the gang."""
    said = _Said()
    raw_min = pod.marks.get(keys.gang_min)
    if raw_min is not None:
        said.min_sources.append(
            (f"annotation {keys.gang_min}", _int(raw_min, where_pod, keys.gang_min))
        )
    raw_timeout = pod.marks.get(keys.gang_timeout)
    if raw_timeout is not None:
        said.timeout_sources.append(
            (f"annotation {keys.gang_timeout}", _float(raw_timeout, where_pod, keys.gang_timeout))
        )
    raw_required = pod.marks.get(keys.gang_required_topology)
    if raw_required is not None:
        said.required_sources.append((f"annotation {keys.gang_required_topology}", raw_required))
    return said


def _group_objects(pod: PodInfo, keys: Keys, groups: Groups, where_pod: str, said: _Said) -> bool:
    """Add what the group objects the pod names say to `said`; False when a native PodGroup
    of the `basic` policy says there is no gang."""
    raw_min = pod.marks.get(keys.gang_min)
    cos = pod.marks.get(COSCHEDULING_LABEL)
    # Whatever but the native field that says "a gang": contradicts a `basic` PodGroup.
    says_gang = bool(pod.marks.get(keys.gang) or cos) or raw_min is not None
    for kind, group in ((GroupKind.NATIVE, pod.group), (GroupKind.COSCHEDULING, cos)):
        if not group:
            continue
        ref = GroupRef(kind, pod.namespace, group)
        decl = groups.get(ref)
        if decl is None:
            if kind is GroupKind.COSCHEDULING and raw_min is not None:
                continue  # the annotation declares it, as before PodGroups were read
            raise GangPending(
                f"{where_pod} names {ref}, which does not exist (yet); waiting for it"
                + ("" if kind is GroupKind.NATIVE else f" (or set {keys.gang_min})")
            )
        if decl.min_members is None:  # the native `basic` policy: no gang
            if says_gang:
                raise InvalidGang(
                    f"gang conflict: {where_pod}: {ref} has the basic policy (no gang), "
                    "but the pod's labels or annotations declare a gang"
                )
            return False
        said.min_sources.append((f"{ref} {_MIN[kind]}", decl.min_members))
        if decl.timeout is not None:
            said.timeout_sources.append((f"{ref} {_TIMEOUT}", decl.timeout))
        if decl.required_key is not None:
            said.required_sources.append((f"{ref} {_TOPOLOGY}", decl.required_key))
    return True


def _levels(
    pod: PodInfo, keys: Keys, said: _Said, key: str, where_pod: str, hierarchy: Hierarchy
) -> tuple[Level | None, Level | None]:
    """The required level (every source agreeing) and the preferred one, inside it."""
    levels = [
        (where, _level(value, where, key, hierarchy)) for where, value in said.required_sources
    ]
    for where, level in levels[1:]:
        if level.key != levels[0][1].key:
            raise InvalidGang(
                f"gang conflict: {where_pod}: {levels[0][0]} requires {levels[0][1].name}, "
                f"{where} requires {level.name}"
            )
    raw_preferred = pod.marks.get(keys.gang_preferred_topology)
    preferred = (
        None
        if raw_preferred is None
        else _level(raw_preferred, f"annotation {keys.gang_preferred_topology}", key, hierarchy)
    )
    if levels and preferred is not None and not _below(preferred, levels[0][1], hierarchy):
        raise InvalidGang(
            f"gang {key}: the preferred level {preferred.name} must lie inside the required "
            f"level {levels[0][1].name} (levels, outermost first: {hierarchy.names()})"
        )
    return (levels[0][1] if levels else None), preferred


def _below(inner: Level, outer: Level, hierarchy: Hierarchy) -> bool:
    """Whether `inner` is a level inside `outer` (a label key outside the hierarchy: only
    when different from it, as nothing says how they nest)."""
    order = [lv.key for lv in hierarchy.levels]
    if inner.key in order and outer.key in order:
        return order.index(inner.key) > order.index(outer.key)
    return inner.key != outer.key


def _int(raw: str, where: str, what: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise InvalidGang(f"{where}: {what} must be an integer, not {raw[:64]!r}") from None


def _float(raw: str, where: str, what: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise InvalidGang(
            f"{where}: {what} must be a number of seconds, not {raw[:64]!r}"
        ) from None


T = TypeVar("T", int, float, str)


def _agreed(sources: list[tuple[str, T]], where: str) -> T:
    """The one value every source gives; InvalidGang naming two that differ."""
    (w0, v0), *rest = sources
    for w, v in rest:
        if v != v0:
            raise InvalidGang(f"gang conflict: {where}: {w0} says {v0}, {w} says {v}")
    return v0


def _level(value: str, where: str, key: str, hierarchy: Hierarchy) -> Level:
    level = hierarchy.resolve(value)
    if level is None:
        raise InvalidGang(
            f"gang {key}: {where}: {value[:64]!r} is no topology level: name one of "
            f"{hierarchy.names()}, or a node label key"
        )
    return level
