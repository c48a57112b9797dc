"""The scheduling verbs' Kubernetes side: called by extender.cluster.build in the extender
mode (the one that binds).

The binder creates a bind's Binding, at most `args.bind_in_flight` at a time; the waker (when
`args.requeue_window_seconds` > 0) touches a pod turned away so that kube-scheduler retries it.
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.kube.handle import Handle
from extender.scheduling.args import SchedulingArgs
from extender.scheduling.kube.binder import Binder
from extender.scheduling.kube.waker import Waker


@dataclass(frozen=True, slots=True)
class SchedulingParts:
    binder: Binder
    waker: Waker | None  # wake

    async def aclose(self) -> None:
        if self.waker is not None:
            await self.waker.aclose()


def build(handle: Handle, args: SchedulingArgs) -> SchedulingParts:
    h, wake = handle, args.requeue_window_seconds > 0
    return SchedulingParts(
        binder=Binder(h.api, h.metrics, h.may_write, args.bind_in_flight),
        waker=Waker(h.api, h.domain, h.metrics, h.may_write) if wake else None,
    )
