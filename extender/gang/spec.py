"""A gang's declaration, read from its members' labels and annotations.

A pod is a member of gang `<name>` when it carries the label `<domain>/gang: <name>` (or
scheduler-plugins' `scheduling.x-k8s.io/pod-group: <name>`), in its namespace; the
annotation `<domain>/gang-min` says how many members must be placed together and
`<domain>/gang-timeout` (seconds, default 60) how long a reservation may wait for them.
Called by the gang manager for every member it learns of; pure, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.core.pod import Keys, PodInfo

DEFAULT_TIMEOUT = 60.0
MAX_MEMBERS = 10_000  # more is a mistake, and the manager's state per gang stays bounded
MAX_TIMEOUT = 86_400.0


class InvalidGang(ValueError):
    """A declaration that cannot be honoured; the message names the gang and the key."""


@dataclass(frozen=True, slots=True)
class GangSpec:
    namespace: str
    name: str
    min_members: int
    timeout: float

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def gang_spec(pod: PodInfo, keys: Keys) -> GangSpec | None:
    """The gang `pod` declares, None if none. Raises InvalidGang."""
    if not pod.gang:
        return None
    key = f"{pod.namespace}/{pod.gang}"
    raw_min = pod.marks.get(keys.gang_min)
    if raw_min is None:
        raise InvalidGang(f"gang {key}: pod {pod.name} has no {keys.gang_min} annotation")
    raw_timeout = pod.marks.get(keys.gang_timeout)
    try:
        min_members = int(raw_min)
        timeout = DEFAULT_TIMEOUT if raw_timeout is None else float(raw_timeout)
    except ValueError:
        raise InvalidGang(
            f"gang {key}: pod {pod.name}: {keys.gang_min} must be an integer and "
            f"{keys.gang_timeout} a number of seconds"
        ) from None
    if not 1 <= min_members <= MAX_MEMBERS:
        raise InvalidGang(f"gang {key}: {keys.gang_min} must be in 1..{MAX_MEMBERS}")
    if not 0 < timeout <= MAX_TIMEOUT:  # also refuses nan and inf
        raise InvalidGang(f"gang {key}: {keys.gang_timeout} must be in (0, {MAX_TIMEOUT:g}]")
    return GangSpec(pod.namespace, pod.gang, min_members, timeout)
