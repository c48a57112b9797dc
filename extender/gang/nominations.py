"""Nominations: each reserved gang member's node, written to its status.nominatedNodeName.

kube-scheduler tries a pod's nominated node first and alone (schedule_one.go,
evaluateNominatedNode), so a nominated member's cycle costs one node's filters and one
extender call naming one node; and it counts nominated pods against the other pods it places
there, so a reservation holds even against pods that never reach the extender. A gang's
nominations follow its places: each member's written once per place, written again when
kube-scheduler cleared it while the place is still held (it clears a pod's nomination when its
bind fails), cleared when the places are given back, dropped for a member bound or gone.
What was written is GangState.nominated; the writes go through `Write` (the adapter
extender.gang.kube.nominator in extender mode; None: nominations are off).

A nomination is worth its PATCH only when the member waits for its cycle: kube-scheduler
tries a new pod within milliseconds when it has no backlog, before the patch can land, and
the member's filter then gives it its place anyway (at 1,000 nodes about 550 of a `bench gang
--preset scale` run's nominations were written for nothing, and 7-22 were used). So the
nominations of members that may be in a cycle soon (created after the reservation, or
ungated when it was made) are delayed: the writer sends each after a moment, and only if
`wanted` still says so then, that is if the member's filter has not come first. A held
member (gated) has no cycle coming: its nomination goes at once.

Functions of the gang manager (extender.gang.manager), on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from extender.core.pod import PodInfo
from extender.gang.state import GangState


class Write(Protocol):
    def __call__(self, pod: PodInfo, node: str, wanted: Callable[[], bool] | None = None) -> None:
        """Write `node` to the pod's status.nominatedNodeName ("" clears it); with `wanted`,
        a moment later and only if wanted() is then True."""


def place(
    g: GangState, write: Write | None, skip: str = "", only: str = "", later: bool = False
) -> None:
    """Write each reserved member's node to it (or only member `only`'s; never `skip`'s, a
    member in its scheduling cycle, which gets its place there), once per place; `later`:
    an ungated member's a moment later, unless its filter came first."""
    if write is None:
        return
    for slot in g.slots.values():
        uid = slot.member
        if uid is None or uid == skip or g.nominated.get(uid) == slot.node:
            continue
        if only and uid != only:
            continue
        m = g.members.get(uid)
        if m is None or m.bound or uid in g.committed:
            continue
        g.nominated[uid] = slot.node
        if later and not m.pod.held:
            write(m.pod, slot.node, _wanted(g, uid, slot.node))
        else:
            write(m.pod, slot.node)


def _wanted(g: GangState, uid: str, node: str) -> Callable[[], bool]:
    """Whether member `uid`'s delayed nomination of `node` is still to be written: not once
    it was forgotten, cleared or moved, nor once the member passed its filter (its cycle
    came first). One not written is no longer recorded, so nothing clears it."""

    def wanted() -> bool:
        if g.nominated.get(uid) != node:
            return False
        m = g.members.get(uid)
        if m is None or m.bound or uid in g.committed or uid in g.passed:
            del g.nominated[uid]
            return False
        return True

    return wanted


def seen(g: GangState, pod: PodInfo, write: Write | None) -> None:
    """The pod watch shows member `pod`: note its nomination arrived, or write it again if
    kube-scheduler cleared it while the place is still held. Without it every retry of a
    member that timed out at the barrier filters every node, too slow for a large gang's
    members to all reach the barrier in time."""
    uid = pod.uid
    if uid not in g.nominated:
        return
    if pod.nominated == g.nominated[uid]:
        g.seen_nominated.add(uid)
    elif uid in g.seen_nominated:
        g.seen_nominated.discard(uid)
        del g.nominated[uid]
        place(g, write, only=uid)


def clear(g: GangState, write: Write | None) -> None:
    """The places are gone: kube-scheduler must not keep counting them, nor try them."""
    if write is not None:
        for uid in g.nominated:
            m = g.members.get(uid)
            if m is not None and not m.bound and uid not in g.committed:
                write(m.pod, "")
    g.nominated = {}
    g.seen_nominated = set()


def forget(g: GangState, uid: str) -> None:
    """Member `uid` is bound, binding or gone: its nomination is not the gang's to keep."""
    g.nominated.pop(uid, None)
    g.seen_nominated.discard(uid)
