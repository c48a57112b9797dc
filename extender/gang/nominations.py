"""Nominations: each reserved gang member's node, written to its status.nominatedNodeName.

kube-scheduler tries a pod's nominated node first and alone (schedule_one.go,
evaluateNominatedNode), so a nominated member's cycle costs one node's filters and one
extender call naming one node; and it counts nominated pods against the other pods it places
there, so a reservation holds even against pods that never reach the extender. A gang's
nominations follow its places: each member's written once per place, written again when
kube-scheduler cleared it while the place is still held (it clears a pod's nomination when its
bind fails), cleared when the places are given back, dropped for a member bound or gone.
What was written is GangState.nominated; the writes go through `Write` (the gang's
Kubernetes side, extender.gang.kube.nominator, in extender mode; None: nominations are off).

The functions here decide and write nothing: `due` says which nominations to write, `seen`
what the pod watch's view of one comes to, `cleared` whose to clear, `wanted` whether a
delayed one is still to be written. The gang manager writes them and records them in the
gang's state through its methods (GangState.nominate, forget_nomination...).

A nomination is worth its PATCH only when the member waits for its cycle: kube-scheduler
tries a new pod within milliseconds when it has no backlog, before the patch can land, and
the member's filter then gives it its place anyway (at 1,000 nodes about 550 of a `bench gang
--preset scale` run's nominations were written for nothing, and 7-22 were used). So the
nominations of members that may be in a cycle soon (created after the reservation, or
ungated when it was made) are delayed: the writer sends each after a moment, and only if
`wanted` still says so then, that is if the member's filter has not come first (one not
written is no longer recorded, so nothing clears it). A held member (gated) has no cycle
coming: its nomination goes at once.

Functions of the gang manager (extender.gang.manager), on the event loop. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from extender.core.pod import PodInfo
from extender.gang.state import GangState


class Write(Protocol):
    def __call__(self, pod: PodInfo, node: str, wanted: Callable[[], bool] | None = None) -> None:
        """Write `node` to the pod's status.nominatedNodeName ("" clears it); with `wanted`,
        a moment later and only if wanted() is then True."""


@dataclass(frozen=True, slots=True)
class Nomination:
    """Member `pod`'s reserved node to write to it; `later`: a moment later, unless its
    filter comes first."""

    pod: PodInfo
    node: str
    later: bool = False


def due(g: GangState, skip: str = "", only: str = "", later: bool = False) -> list[Nomination]:
    """Each reserved member's node to write to it (or only member `only`'s; never `skip`'s,
    a member in its scheduling cycle, which gets its place there), once per place; `later`:
    an ungated member's a moment later."""
    out = []
    for slot in g.slots.values():
        uid = slot.member
        if uid is None or uid == skip or g.nominated.get(uid) == slot.node:
            continue
        if only and uid != only:
            continue
        m = g.members.get(uid)
        if m is None or m.bound or uid in g.committed:
            continue
        out.append(Nomination(m.pod, slot.node, later and not m.pod.held))
    return out


def wanted(g: GangState, uid: str, node: str) -> bool:
    """Whether member `uid`'s delayed nomination of `node` is still to be written: not once
    it was forgotten, cleared or moved, nor once the member is gone, bound, binding or passed
    its filter (its cycle came first)."""
    if g.nominated.get(uid) != node:
        return False
    m = g.members.get(uid)
    return not (m is None or m.bound or uid in g.committed or uid in g.passed)


class Seen(Enum):
    """What the pod watch showing a member comes to for its nomination."""

    NOTHING = "nothing"  # none is recorded, or the watch shows an older state
    ARRIVED = "arrived"  # the watch shows it: note it (GangState.nomination_seen)
    CLEARED = "cleared"  # kube-scheduler cleared it while the place is held: write it again


def seen(g: GangState, pod: PodInfo) -> Seen:
    """The pod watch shows member `pod`: its nomination arrived, or kube-scheduler cleared it
    while the place is still held. Without writing it again every retry of a member that
    timed out at the barrier filters every node, too slow for a large gang's members to all
    reach the barrier in time."""
    node = g.nominated.get(pod.uid)
    if node is None:
        return Seen.NOTHING
    if pod.nominated == node:
        return Seen.ARRIVED
    return Seen.CLEARED if pod.uid in g.seen_nominated else Seen.NOTHING


def cleared(g: GangState) -> list[PodInfo]:
    """The places are gone: the members whose nominations to clear, so that kube-scheduler
    neither keeps counting them nor tries them."""
    out = []
    for uid in g.nominated:
        m = g.members.get(uid)
        if m is not None and not m.bound and uid not in g.committed:
            out.append(m.pod)
    return out
