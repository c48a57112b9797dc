"""Nominations: each reserved gang member's node, written to its status.nominatedNodeName.

kube-scheduler tries a pod's nominated node first and alone (schedule_one.go,
evaluateNominatedNode), so a nominated member's cycle costs one node's filters and one
extender call naming one node; and it counts nominated pods against the other pods it places
there, so a reservation holds even against pods that never reach the extender. A gang's
nominations follow its places: each member's written once per place, written again when
kube-scheduler cleared it while the place is still held (it clears a pod's nomination when its
bind fails), cleared when the places are given back, dropped for a member bound or gone.
What was written is GangState.nominated; the writes go through `Write` (the adapter
extender.adapters.nominator in extender mode; None: nominations are off).

Functions of the gang manager (extender.gang.manager), on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable

from extender.core.pod import PodInfo
from extender.gang.state import GangState

# Writes a member's node to its status.nominatedNodeName ("" clears it).
Write = Callable[[PodInfo, str], None]


def place(g: GangState, write: Write | None, skip: str = "", only: str = "") -> None:
    """Write each reserved member's node to it (or only member `only`'s; never `skip`'s, a
    member in its scheduling cycle, which gets its place there), once per place."""
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
        write(m.pod, slot.node)


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
