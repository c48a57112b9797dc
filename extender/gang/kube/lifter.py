"""Lifter: removes the gang gate from a held member, so that kube-scheduler may try it.

The gang gate decides whom (GangGate.lift); this patches each pod with a strategic
merge patch that deletes the gate by name (other gates stay), through PodPatches (the pod's
UID named, at most `limit` in flight: the gate names the rest again at its next turn), and
says when each patch ended, so that the gate names no pod again while its lift is in
flight. `tell` shows on a held member's pod why it stays held (a gang
that can never fit), as a condition of its status. Each outcome is counted
(escher_gang_lifts_total, "told" for a condition). Created by extender.gang.kube.build, called
by the gang gate's loop.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from extender.core.pod import PodInfo
from extender.kube.client import KubeAPI
from extender.kube.podpatches import STRATEGIC_MERGE, PodPatches
from extender.metrics import Metrics


class Lifter:
    def __init__(
        self,
        api: KubeAPI,
        gate: str,
        metrics: Metrics,
        may_write: Callable[[], bool],
        limit: int = 64,
    ) -> None:
        # At most the API client's connections (64) in flight: a lift waiting for one counts
        # against its 30 s, and with 1,024 in flight, a gang of 10,000 let through at once on
        # a loaded API server had 1,435 lifts time out so (issue 61). The gate names the
        # rest at its next turns, as lifts end.
        self._gate = gate
        self._condition = f"{gate.partition('/')[0]}/GangHeld"
        self._patches = PodPatches(api, metrics.gang_lifts, may_write, limit)

    def __call__(self, pod: PodInfo, ended: Callable[[], None] | None = None) -> bool:
        """Lift `pod`'s gate: whether the patch was sent (not while this replica may not
        write, nor past `limit` in flight), and then `ended()` once it is done or failed."""
        # Deletes the gate by name: other gates stay.
        body = {"spec": {"schedulingGates": [{"name": self._gate, "$patch": "delete"}]}}
        what = f"lifting the gang gate of pod {pod.key}"
        return self._patches.send(
            pod.namespace,
            pod.name,
            pod.uid,
            body,
            what,
            content_type=STRATEGIC_MERGE,
            ended=ended,
        )

    def tell(self, pod: PodInfo, reason: str) -> None:
        """Show on held member `pod` why it waits (a condition of its status, `{domain}/
        GangHeld` True with the reason; False once it no longer waits, reason "")."""
        condition = {
            "type": self._condition,
            "status": "True" if reason else "False",
            "reason": "GangCannotFit" if reason else "GangLetThrough",
            "message": reason or "its gang has places",
            "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        what = f"telling pod {pod.key} why its gang waits"
        self._patches.send(
            pod.namespace,
            pod.name,
            pod.uid,
            {"status": {"conditions": [condition]}},
            what,
            content_type=STRATEGIC_MERGE,
            subresource="status",
            outcome="told",
        )

    async def aclose(self) -> None:
        """Cancel the lifts still in flight (on stop)."""
        await self._patches.aclose()
