"""ReservationFit: keep other pods off the cpu, memory and pods that gangs have reserved.

kube-scheduler's NodeResourcesFit does not know the extender's reservations, so while any
exists, a pod's physical requests are checked against the ledger on the nodes that hold
reservations (everywhere else kube-scheduler's own check is the same one). A gang member on
its reserved place never gets here: the gang filter's verdict is final. With no reservation
anywhere this plugin costs one dictionary lookup. Run by extender.scheduling.verbs through the
registry.
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.core.ledger import Ledger
from extender.core.plugins import PASS, Verdict
from extender.core.pod import PodInfo, Rejection

NAME = "ReservationFit"


class ReservationFit:
    name = NAME

    def relevant(self, pod: PodInfo, ledger: Ledger) -> bool:
        return bool(ledger.reserved_nodes())  # any pod, while some gang holds a place

    def filter(self, pod: PodInfo, nodes: Sequence[str], ledger: Ledger) -> Verdict:
        short = ledger.short_of_physical(nodes, pod.requests)
        if not short:
            return PASS
        # One Rejection per resource short, shared by its nodes (thousands, at scale).
        why = {
            r: Rejection(f"{r} on this node is reserved for a gang") for r in set(short.values())
        }
        return Verdict({node: why[r] for node, r in short.items()})
