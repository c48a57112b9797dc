"""EphemeralResourceFit: the ledger's answer to "does this node have room?".

The filter is kube-scheduler's NodeResourcesFit for the ephemeral resources the extender
owns, counted against the ledger, which also holds pods accepted for binding but not yet
bound. The scorer prefers nodes where the requested ephemeral resources are least used,
as NodeResourcesFit's LeastAllocated does for cpu and memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from extender.filters.base import PluginContext, PodInfo, Rejection
from extender.filters.reservation import holds_reservation
from extender.ledger import Ledger
from extender.wire import MAX_SCORE

NAME = "EphemeralResourceFit"


class EphemeralResourceFit:
    name = NAME

    def __init__(self, ctx: PluginContext | None = None) -> None:
        pass  # needs nothing but the ledger

    def filter(self, pod: PodInfo, nodes: Sequence[str], ledger: Ledger) -> Mapping[str, Rejection]:
        # A gang member's reservation already holds its ephemeral amounts.
        if not pod.ephemeral or holds_reservation(pod, ledger):
            return {}
        return {
            node: Rejection(str(s), s.unresolvable)
            for node, s in ledger.shortfalls(nodes, pod.ephemeral).items()
        }

    def score(self, pod: PodInfo, nodes: Sequence[str], ledger: Ledger) -> Mapping[str, int]:
        return {
            node: int(MAX_SCORE * free + 0.5)
            for node, free in ledger.free_fractions(nodes, pod.ephemeral).items()
        }
