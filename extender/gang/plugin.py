"""Gang: the filter plugin of the gang feature (see extender.gang.manager for how it works).

Passes a gang member only the node reserved for it (a final verdict: the reservation
already holds everything it requests, so no other filter need look), or turns every node
away with why the gang waits; an awaitable of that while the gang is planned off the event
loop. Pods of no gang are not its business (`relevant`); members of a gang already bound
are left to the other filters. Listed in extender.scheduling.registry; run by
extender.scheduling.verbs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence

from extender.core.ledger import Ledger
from extender.core.plugins import PASS, Verdict
from extender.core.pod import PodInfo
from extender.gang import Gangs


class GangFilter:
    name = "Gang"

    def __init__(self, gangs: Gangs) -> None:
        self.gangs = gangs

    def relevant(self, pod: PodInfo, ledger: Ledger) -> bool:
        return bool(pod.gang)

    def filter(
        self, pod: PodInfo, nodes: Sequence[str], ledger: Ledger
    ) -> Verdict | Awaitable[Verdict]:
        verdict = self.gangs.filter(pod, nodes)
        return PASS if verdict is None else verdict
