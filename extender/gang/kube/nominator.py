"""Nominator: writes a gang member's reserved node into its `status.nominatedNodeName`.

kube-scheduler tries a pod's nominated node first, alone, before it looks at any other
(schedule_one.go, evaluateNominatedNode): when that node passes its filters and the
extender's, the cycle ends there. A member whose place is nominated therefore costs
kube-scheduler one node's filters, one extender filter call naming one node, and no scoring
of the cluster, where it otherwise filtered every node and sent the extender every name.
kube-scheduler also counts nominated pods against the other pods it places on the node
(with their priority or lower): a reservation is then respected by pods that never reach the
extender. When the reservation is released, the nomination is cleared (an empty name).

The gang manager decides what to nominate (GangManager.nominate is this); this patches the
status subresource with a merge patch, through PodPatches (the pod's UID named, at most
`limit` in flight: a nomination not sent costs only speed, the member's cycle then looks at
every node, as without one). Counted by escher_gang_nominations_total.

A delayed nomination (extender.gang.nominations: a member whose cycle may come first) is
sent the gang args' nominate_delay_seconds later, if the manager still wants it then; one no
longer wanted is counted `unneeded`. Each waits on a timer of the loop, one per pod,
cancelled on stop. Created by extender.gang.kube.build.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from extender.core.pod import PodInfo
from extender.gang.args import GangArgs
from extender.kube.client import KubeAPI
from extender.kube.podpatches import PodPatches
from extender.metrics import Metrics


class Nominator:
    def __init__(
        self,
        api: KubeAPI,
        metrics: Metrics,
        may_write: Callable[[], bool],
        args: GangArgs,
        limit: int = 1024,
    ) -> None:
        self._counter = metrics.gang_nominations
        self._patches = PodPatches(api, self._counter, may_write, limit)
        self._delay = args.nominate_delay_seconds
        self._delayed: dict[str, asyncio.TimerHandle] = {}  # pod uid -> its timer

    def __call__(self, pod: PodInfo, node: str, wanted: Callable[[], bool] | None = None) -> None:
        """Nominate `node` for `pod` ("" clears the nomination); with `wanted`, that delay
        later, if wanted() is True then. A later call for the pod replaces a
        delayed one."""
        pending = self._delayed.pop(pod.uid, None)
        if pending is not None:
            pending.cancel()
        if wanted is not None and self._delay > 0:
            loop = asyncio.get_running_loop()
            self._delayed[pod.uid] = loop.call_later(self._delay, self._due, pod, node, wanted)
        else:
            self._send(pod, node)

    def _due(self, pod: PodInfo, node: str, wanted: Callable[[], bool]) -> None:
        del self._delayed[pod.uid]
        if wanted():
            self._send(pod, node)
        else:
            self._counter.labels("unneeded").inc()

    def _send(self, pod: PodInfo, node: str) -> None:
        body = {"status": {"nominatedNodeName": node or None}}
        what = f"nominating node {node!r} for pod {pod.key}"
        self._patches.send(
            pod.namespace,
            pod.name,
            pod.uid,
            body,
            what,
            subresource="status",
            outcome="sent" if node else "cleared",
        )

    async def aclose(self) -> None:
        """Cancel the delayed nominations and the patches still in flight (on stop)."""
        for pending in self._delayed.values():
            pending.cancel()
        self._delayed.clear()
        await self._patches.aclose()
