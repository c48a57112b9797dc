"""Nominator: writes a node into pods' `status.nominatedNodeName`, at once or a moment later.

kube-scheduler tries a pod's nominated node first, alone, before it looks at any other
(schedule_one.go, evaluateNominatedNode; before its sampling of nodes too): when that node
passes its filters and the extenders', the cycle ends there, with no scoring (one feasible
node). It also counts nominated pods against the other pods it places on the node (with
their priority or lower). The gang feature nominates members' reserved nodes
(extender.gang.kube.nominator), the preference feature preferred nodes
(extender.preference.nominations).

A nomination is a merge patch of the status subresource, through PodPatches (the pod's UID
named, at most `limit` in flight: a nomination not sent costs only speed, the pod's cycle
then looks at the nodes as without one), counted on the caller's counter. With `wanted`, it
is sent `delay` seconds later, and only if wanted() says so then (else counted `unneeded`):
kube-scheduler tries a new pod within milliseconds when it has no backlog, before a patch
can land, so a nomination sent at once would often be written for nothing. Each delayed one
waits on a timer of the loop, one per pod, cancelled on stop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from prometheus_client import Counter

from extender.core.pod import PodInfo
from extender.kube.client import KubeAPI
from extender.kube.podpatches import PodPatches


class Nominator:
    def __init__(
        self,
        api: KubeAPI,
        counter: Counter,
        may_write: Callable[[], bool],
        delay: float,
        limit: int = 1024,
    ) -> None:
        self._counter = counter
        self._patches = PodPatches(api, counter, may_write, limit)
        self._delay = delay
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
