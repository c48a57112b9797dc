"""Repair: one member's reserved place moved when kube-scheduler refuses its node.

kube-scheduler runs its own filters before the extender's, so a member's reserved node can be
missing from the nodes it offers: a pod the extender never saw took room there, or
kube-scheduler counts a pod twice on it. The second comes of nominations
(extender.gang.nominations): a member created after its gang was reserved is nominated at
once, and when kube-scheduler handles that pod update across the member's assume (its event
handler finds the pod not assumed yet, and queues it after the cycle let it go), the member
is put back among the node's nominated pods beside the assumed pod itself until it binds
(v1.37 eventhandlers.go updatePodInSchedulingQueue; schedule_one.go skipPodSchedule drops
the queued copy but not its nomination). A gang of 1,100 packed to the nodes' pod limit, its
members created one by one, met it in 2 of 3 runs on this machine.

Planning the whole gang again for one member gives back every place and refuses the bind of
every member waiting at the barrier. Instead the member's place moves to an offered node
(where kube-scheduler found the member feasible) with room: in the same domain of the gang's
required level, in the same domain of its preferred level first. Only when none has room is
the gang planned again.

Called by the gang manager (extender.gang.manager) on the event loop: one pass over the
offered nodes (lookups only) and at most MAX_TRIES reservation attempts. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.core.ledger import Ledger, NodeView
from extender.gang.state import GangState, Member, Slot

# Reservation attempts per repair: candidates are checked for room first, so an attempt
# fails only when a concurrent change took the room.
MAX_TRIES = 8


def move(g: GangState, m: Member, slot: Slot, nodes: Sequence[str], ledger: Ledger) -> bool:
    """Move member `m`'s place `slot` to one of `nodes` with room for it, in the same domain
    of `g`'s required level (its preferred level's first); False when none has room."""
    old = ledger.node(slot.node)
    if old is None:
        return False
    required, preferred = g.spec.required, g.spec.preferred
    domain = old.labels.get(required.key) if required is not None else None
    if required is not None and domain is None:
        return False
    near = old.labels.get(preferred.key) if preferred is not None else None
    first: list[str] = []
    rest: list[str] = []
    for name in nodes:
        if name in m.excluded or (m.feasible is not None and name not in m.feasible):
            continue
        view = ledger.node(name)
        if view is None or (required is not None and view.labels.get(required.key) != domain):
            continue
        if not _room(view, slot) or (m.constraints is not None and m.constraints.check(view)):
            continue
        if near is not None and preferred is not None and view.labels.get(preferred.key) == near:
            first.append(name)
            if len(first) == MAX_TRIES:
                break
        elif len(rest) < MAX_TRIES:
            rest.append(name)
    for name in (first + rest)[:MAX_TRIES]:
        if ledger.reserve([(slot.holder, name, slot.amounts)]) is None:
            slot.node = name
            return True
    return False


def _room(view: NodeView, slot: Slot) -> bool:
    """Whether `view` shows room for the place (what it reports; the ledger checks again)."""
    return all(
        view.available(res) >= want
        for res, want in slot.amounts.items()
        if want > 0 and (res in view.ephemeral or res in view.physical)
    )
