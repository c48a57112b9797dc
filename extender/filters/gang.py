"""Gang: all-or-nothing placement of a gang's members (see extender.gang for how).

Rejects every node for a member whose gang is not complete or does not fit, reserves the
whole gang when its last member arrives, and then passes each member only its reserved node.
Wake-ups for the gang's other members go to the context's notifier.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from extender.filters.base import PluginContext, PodInfo, Rejection
from extender.gang import InvalidGang, gang_of
from extender.ledger import Ledger

NAME = "Gang"


class Gang:
    name = NAME

    def __init__(self, ctx: PluginContext) -> None:
        self.ctx = ctx

    def filter(self, pod: PodInfo, nodes: Sequence[str], ledger: Ledger) -> Mapping[str, Rejection]:
        try:
            spec = gang_of(pod, self.ctx.gangs.keys)
        except InvalidGang as e:
            return dict.fromkeys(nodes, Rejection(str(e), unresolvable=True))
        if spec is None:
            return {}
        rejected, wakes = self.ctx.gangs.filter(pod, spec, nodes)
        if wakes:
            self.ctx.notify(wakes)
        return rejected
