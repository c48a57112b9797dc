"""Places: which reserved place a gang member takes, and moving one kube-scheduler refused.

A member's place is the one its gang's plan gave it, or a place kept for a member to come
that suits it: its requests fit the place's amounts, its constraints allow the node
(`slot_of`).

kube-scheduler runs its own filters before the extender's, so a member's reserved node can
be missing from the nodes it offers: a pod the extender never saw took room there, or
kube-scheduler counts a pod twice on it. The second comes of nominations
(extender.gang.nominations): a member created after its gang was reserved is nominated at
once, and when kube-scheduler handles that pod update across the member's assume (its event
handler finds the pod not assumed yet, and queues it after the cycle let it go), the member
is put back among the node's nominated pods beside the assumed pod itself until it binds
(v1.37 eventhandlers.go updatePodInSchedulingQueue; schedule_one.go skipPodSchedule drops
the queued copy but not its nomination). A gang of 1,100 packed to the nodes' pod limit, its
members created one by one, met it in 6 of 11 runs on this machine.

Planning the whole gang again for one member gives back every place and refuses the bind of
every member waiting at the barrier. Instead the member's place moves to an offered node
(where kube-scheduler found the member feasible) with room: in the same domain of the gang's
required level, in the same domain of its preferred level first. Only when none has room is
the gang planned again.

A gang bound whole is done with places, but not with its required level: a member created
after it (the operator replacing a deleted pod) may go only to the domain its bound members
are in (`within_bound`), else kube-scheduler would place it anywhere.

Functions of the gang manager (extender.gang.manager), on the event loop: a move is one pass
over the offered nodes (lookups only) and at most MAX_TRIES reservation attempts. Pure, no
I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.core.ledger import Ledger, NodeView
from extender.core.plugins import Verdict
from extender.core.pod import Rejection
from extender.gang.state import GangState, Member, Slot

# Reservation attempts per move: candidates are checked for room first, so an attempt fails
# only when a concurrent change took the room.
MAX_TRIES = 8


def slot_of(g: GangState, m: Member, nodes: Sequence[str], ledger: Ledger) -> Slot | None:
    """m's place, or a place kept for a member to come that suits it among `nodes` (then
    assigned to m, GangState.assign)."""
    slot = g.place_of(m.pod.uid)
    if slot is not None:
        return slot
    offered = set(nodes)
    for slot in g.slots.values():
        if slot.member is None and slot.node in offered and suits(m, slot, ledger):
            g.assign(slot, m.pod.uid)
            return slot
    return None


def suits(m: Member, slot: Slot, ledger: Ledger) -> bool:
    """Whether a place planned for a member to come suits member `m`."""
    if any(v > slot.amounts.get(r, 0) for r, v in m.pod.requests.items()):
        return False
    view = ledger.node(slot.node)
    return view is not None and _allowed(m, view)


def move(g: GangState, m: Member, slot: Slot, nodes: Sequence[str], ledger: Ledger) -> str | None:
    """Hold member `m`'s place `slot` in the ledger on one of `nodes` with room for it, in
    the same domain of `g`'s required level (its preferred level's first): that node (the
    caller moves the place there, GangState.move), or None when none has room."""
    old = ledger.node(slot.node)
    if old is None:
        return None
    required, preferred = g.spec.required, g.spec.preferred
    domain = old.labels.get(required.key) if required is not None else None
    if required is not None and domain is None:
        return None
    near = old.labels.get(preferred.key) if preferred is not None else None
    first: list[str] = []
    rest: list[str] = []
    for name in nodes:
        view = ledger.node(name)
        if view is None or (required is not None and view.labels.get(required.key) != domain):
            continue
        if not _room(view, slot) or not _allowed(m, view):
            continue
        if near is not None and preferred is not None and view.labels.get(preferred.key) == near:
            first.append(name)
            if len(first) == MAX_TRIES:
                break
        elif len(rest) < MAX_TRIES:
            rest.append(name)
    for name in (first + rest)[:MAX_TRIES]:
        if ledger.reserve([(slot.holder, name, slot.amounts)]) is None:
            return name
    return None


def within_bound(g: GangState, nodes: Sequence[str], ledger: Ledger) -> Verdict | None:
    """Where a new member of bound gang `g` may go (one replacing a member that was deleted,
    say): when `g` requires a level, only the domain its bound members are in, the others
    turned away with why. None: no such constraint (no required level, or no bound member
    left to say which domain), the member is an ordinary pod."""
    level = g.spec.required
    if level is None:
        return None
    domains = {
        view.labels.get(level.key)
        for x in g.members.values()
        if x.bound and (view := ledger.node(x.pod.node)) is not None
    }
    if len(domains) != 1 or None in domains:
        return None
    domain = domains.pop()
    why = Rejection(f"gang {g.key} is bound in {level.name} {domain}; its members go there")
    return Verdict(
        {
            n: why
            for n in nodes
            if (view := ledger.node(n)) is None or view.labels.get(level.key) != domain
        }
    )


def _allowed(m: Member, view: NodeView) -> bool:
    """Whether member `m` may go to the node: not refused it by kube-scheduler, among those
    kube-scheduler found feasible (when only it can say), allowed by its constraints."""
    if view.name in m.excluded or (m.feasible is not None and view.name not in m.feasible):
        return False
    return m.constraints is None or not m.constraints.check(view)


def _room(view: NodeView, slot: Slot) -> bool:
    """Whether `view` shows room for the place (what it reports; the ledger checks again)."""
    return all(
        view.available(res) >= want
        for res, want in slot.amounts.items()
        if want > 0 and (res in view.ephemeral or res in view.physical)
    )
