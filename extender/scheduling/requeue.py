"""Requeue: wakes the pods the filter turned away for an ephemeral resource that then freed.

kube-scheduler requeues a pod an extender rejected on any cluster event (it records the
pseudo-plugin "Extender" as the rejector: the protocol has no queueing hints). The event that
frees an ephemeral resource, its holder finishing or going away, reaches kube-scheduler and
this extender's pod watch at about the same time. When kube-scheduler retries a waiting pod
first, the filter still counts the holding and turns the pod away again, and the pod then
waits for some unrelated event, or kube-scheduler's five-minute flush.

So the filter notes every pod it turns away from all nodes while the pod requests ephemeral
resources, and when a holding of one of them is released within `window` seconds after, the
pod is woken: `wake` (extender.scheduling.kube.waker) touches it, a pod update that kube-scheduler
requeues it on. Each note wakes once. Notes are bounded by count and age, and dropped when
the pod is bound or gone. Created by extender.service; noted by extender.scheduling.verbs, released
by the cluster view's pod events. Runs on the event loop; pure, no I/O.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from extender.core.events import PodChange, PodEvent
from extender.core.pod import PodInfo


@dataclass(frozen=True, slots=True)
class Turned:
    """A pod the filter turned away, and when."""

    namespace: str
    name: str
    wants: frozenset[str]  # the ephemeral resources it requests
    at: float


Wake = Callable[[str, str, str], None]  # (uid, namespace, name)


class Requeue:
    def __init__(
        self,
        wake: Wake,
        window: float = 5.0,
        max_pods: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.wake = wake
        self.window = window
        self.max_pods = max_pods
        self.clock = clock
        self._turned: OrderedDict[str, Turned] = OrderedDict()
        self.woken = 0

    def __len__(self) -> int:
        return len(self._turned)

    def turned_away(self, pod: PodInfo) -> None:
        """The filter passed `pod` on no node. Noted only if it requests ephemeral resources
        (a freed holding is what it may be waiting for)."""
        if not pod.uid or not pod.ephemeral:
            return
        now = self.clock()
        self._turned.pop(pod.uid, None)
        self._turned[pod.uid] = Turned(pod.namespace, pod.name, frozenset(pod.ephemeral), now)
        self._expire(now)

    def released(self, freed: Mapping[str, int]) -> list[str]:
        """A holding of `freed` was given back: wake the pods turned away for one of these
        resources within the window; returns their uids."""
        now = self.clock()
        self._expire(now)
        names = freed.keys()
        woken = [uid for uid, t in self._turned.items() if not t.wants.isdisjoint(names)]
        for uid in woken:
            t = self._turned.pop(uid)
            self.wake(uid, t.namespace, t.name)
        self.woken += len(woken)
        return woken

    def on_pod(self, event: PodEvent) -> None:
        """Subscribed to the cluster view: a pod gone gives back what it held; a pod bound or
        gone no longer waits."""
        if event.change is PodChange.GONE or (event.pod is not None and event.pod.node):
            self._turned.pop(event.uid, None)
        if event.change is PodChange.GONE and event.freed:
            self.released(event.freed)

    def _expire(self, now: float) -> None:
        turned = self._turned
        while turned:
            first = next(iter(turned.values()))
            if len(turned) <= self.max_pods and now - first.at <= self.window:
                break
            turned.popitem(last=False)
