"""A watch of a paper experiment's pods until every one is Succeeded, in a thread: when each
was first seen bound (and on which node) and in each phase (Workload.wait_phase's record,
with a count for its end: wait_phase checks every name on every event, which at 10,000 pods
costs the watch more than the pods' own events). `on_bound(name, node)` is called once per
pod as it is first seen bound, on the watch's thread (E1 sets the pod's modelled run time
there). Used by e8_makespan and e1_locality."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kubernetes import client

from escher_harness.listwatch import list_then_watch
from escher_harness.workload import Progress, Workload


class Succeeded:
    def __init__(
        self,
        work: Workload,
        names: set[str],
        deadline: float,
        on_bound: Callable[[str, str], None] | None = None,
    ) -> None:
        self.progress: dict[str, Progress] = {}
        self.nodes: dict[str, str] = {}
        self.names, self.done, self.on_bound = names, 0, on_bound
        self.thread = threading.Thread(
            target=list_then_watch,
            args=(work.core.list_namespaced_pod, work.namespace),
            kwargs={
                "seen": self._seen,
                "done": lambda: self.done == len(names),
                "deadline": time.monotonic() + deadline,
            },
            daemon=True,
        )
        self.thread.start()

    def _seen(self, pod: client.V1Pod, deleted: bool) -> None:
        name = pod.metadata.name if pod.metadata else ""
        if deleted or name not in self.names or pod.spec is None:
            return
        now = time.monotonic()
        mine = self.progress.setdefault(name, Progress())
        if mine.bound is None and pod.spec.node_name:
            mine.bound = now
            self.nodes[name] = pod.spec.node_name
            if self.on_bound is not None:
                self.on_bound(name, pod.spec.node_name)
        phase = pod.status.phase if pod.status is not None else None
        if phase and phase not in mine.phases:
            mine.phases[phase] = now
            self.done += phase == "Succeeded"
