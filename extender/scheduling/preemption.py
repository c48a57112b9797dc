"""Preemption of ephemeral-resource holders: which victims free what a preemptor needs.

kube-scheduler's DefaultPreemption proposes, per candidate node, the lowest-priority pods
whose eviction lets the preemptor fit its own filters (NodeResourcesFit counts the ephemeral
resources written back to the nodes). The extender's preempt verb then checks the proposal
against the ledger, which also holds pods accepted at bind and knows capacities lowered
before the nodes show it: if the proposed victims free enough of every ephemeral resource
the preemptor requests, they stand; if not, more holders of lower priority than the
preemptor are added, fewest first by priority; if even evicting all of those cannot help,
the node is dropped. kube-scheduler only accepts victims that are on the node, and a node
must keep at least one. Called by extender.scheduling.verbs; reads the ledger only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from extender.core.ledger import HolderKind, Ledger
from extender.core.pod import PodInfo


def victims(ledger: Ledger, pod: PodInfo, node: str, proposed: Sequence[str]) -> list[str]:
    """The uids to evict on `node` so `pod` fits its ephemeral resources; [] when it can't."""
    if not pod.ephemeral:
        return list(proposed)
    view = ledger.node(node)
    if view is None:
        return []
    holders = {h.holder: h for h in ledger.holders_on(node) if h.kind is not HolderKind.RESERVATION}
    chosen = [uid for uid in proposed if uid in holders]
    short = _short(pod, view.ephemeral, view.used, [holders[u].amounts for u in chosen])
    if short:
        extra = sorted(
            (
                h
                for h in holders.values()
                if h.holder not in chosen
                and h.kind is HolderKind.POD
                and h.priority < pod.priority
                and any(h.amounts.get(r, 0) for r in short)
            ),
            key=lambda h: (h.priority, h.holder),
        )
        for h in extra:
            chosen.append(h.holder)
            short = _short(pod, view.ephemeral, view.used, [holders[u].amounts for u in chosen])
            if not short:
                break
    return chosen if not short and chosen else []


def _short(
    pod: PodInfo,
    capacity: Mapping[str, int],
    used: Mapping[str, int],
    freed: Sequence[Mapping[str, int]],
) -> set[str]:
    """The ephemeral resources `pod` still lacks once `freed` is given back."""
    out = set()
    for r, want in pod.ephemeral.items():
        free = capacity.get(r, 0) - used.get(r, 0) + sum(a.get(r, 0) for a in freed)
        if free < want:
            out.add(r)
    return out
