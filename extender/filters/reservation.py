"""ReservationFit: keep other pods off the cpu, memory and pods that gangs have reserved.

kube-scheduler's NodeResourcesFit does not know the extender's reservations, so while any
exists, every pod's physical requests are checked against the ledger, where reservations
count as used. A pod holding a reservation itself is not checked: its place is already
counted. With no reservation anywhere this plugin costs one integer comparison.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from extender.filters.base import PluginContext, PodInfo, Rejection
from extender.ledger import HolderKind, Ledger

NAME = "ReservationFit"


class ReservationFit:
    name = NAME

    def __init__(self, ctx: PluginContext) -> None:
        self.ctx = ctx

    def filter(self, pod: PodInfo, nodes: Sequence[str], ledger: Ledger) -> Mapping[str, Rejection]:
        if not ledger.reservations or holds_reservation(pod, ledger):
            return {}
        return {
            node: Rejection(f"{s.resource} on this node is reserved for a gang")
            for node, s in ledger.physical_shortfalls(nodes, pod.amounts).items()
        }


def holds_reservation(pod: PodInfo, ledger: Ledger) -> bool:
    h = ledger.holding(pod.uid)
    return h is not None and h.kind is HolderKind.RESERVATION
