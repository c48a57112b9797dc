"""Nominator: writes a gang member's reserved node into its `status.nominatedNodeName`.

kube-scheduler tries a pod's nominated node first, alone, before it looks at any other
(schedule_one.go, evaluateNominatedNode): when that node passes its filters and the
extender's, the cycle ends there. A member whose place is nominated therefore costs
kube-scheduler one node's filters, one extender filter call naming one node, and no scoring
of the cluster, where it otherwise filtered every node and sent the extender every name.
kube-scheduler also counts nominated pods against the other pods it places on the node
(with their priority or lower): a reservation is then respected by pods that never reach the
extender. When the reservation is released, the nomination is cleared (an empty name).

The gang manager decides what to nominate (GangManager.nominate is this); the writing is the
toolkit's (extender.kube.nominator: a status merge patch naming the pod's UID, at most `limit`
in flight), counted by escher_gang_nominations_total. A delayed nomination
(extender.gang.nominations: a member whose cycle may come first) is sent the gang args'
nominate_delay_seconds later, if the manager still wants it then. Created by
extender.gang.kube.build.
"""

from __future__ import annotations

from collections.abc import Callable

from extender.gang.args import GangArgs
from extender.kube import nominator
from extender.kube.client import KubeAPI
from extender.metrics import Metrics


class Nominator(nominator.Nominator):
    def __init__(
        self,
        api: KubeAPI,
        metrics: Metrics,
        may_write: Callable[[], bool],
        args: GangArgs,
        limit: int = 1024,
    ) -> None:
        delay = args.nominate_delay_seconds
        super().__init__(api, metrics.gang_nominations, may_write, delay, limit)
