"""The capacity race's history check: no pod bound after a capacity was accepted takes its
node above it, once kube-scheduler's in-flight binds are done.

A test records every bind and every bound pod's departure of its pods from a watch
(`PodHistory`), and each capacity a PUT answered 200 as a `Step` of kind "capacity" at a
`fence` read right after the answer, then checks the lot with `over_commits`: everything is
ordered by the API server's resourceVersion (etcd's revision, which orders every write of the
one etcd the embedded cluster runs). Shared by the mode that binds against Node status
(tests/e2e/test_split.py) and the one that allocates DRA devices (tests/e2e/test_dra.py).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client, watch


@dataclass(frozen=True)
class Step:
    """One moment of the race's history, in the API server's order (`rv`)."""

    rv: int
    at: float  # time.monotonic() when the test saw it
    kind: str  # "bind", "leave" (a bound pod deleted) or "capacity" (a PUT answered 200)
    what: str  # the pod, or the capacity accepted


class PodHistory:
    """Every bind and every bound pod's deletion of the pods `selector` matches in namespace
    default, as a watch reports them, with its resourceVersion. Listed at creation, so
    nothing created after is missed."""

    def __init__(self, core: client.CoreV1Api, selector: str) -> None:
        self.core, self.selector = core, selector
        self.steps: list[Step] = []
        self.gone: set[str] = set()
        self._bound: set[str] = set()
        self._stop = threading.Event()
        listed: Any = core.list_namespaced_pod("default", label_selector=selector)
        self._rv: str = listed.metadata.resource_version
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        w: Any = watch.Watch()  # type: ignore[no-untyped-call]
        while not self._stop.is_set():
            for ev in w.stream(
                self.core.list_namespaced_pod,
                "default",
                label_selector=self.selector,
                resource_version=self._rv,
                timeout_seconds=1,
            ):
                p, now = ev["object"], time.monotonic()
                self._rv = p.metadata.resource_version
                name, rv = p.metadata.name, int(p.metadata.resource_version)
                if ev["type"] == "DELETED":
                    self.gone.add(name)
                    if name in self._bound:
                        self.steps.append(Step(rv, now, "leave", name))
                elif p.spec.node_name and name not in self._bound:
                    self._bound.add(name)
                    self.steps.append(Step(rv, now, "bind", name))

    def binds(self) -> int:
        return sum(1 for s in self.steps if s.kind == "bind")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def fence(core: client.CoreV1Api) -> int:
    """A resourceVersion at or above every write the API server had committed when this was
    called (a list without resourceVersion is a consistent read)."""
    listed: Any = core.list_namespaced_pod("default", limit=1)
    return int(listed.metadata.resource_version)


def over_commits(steps: list[Step], first: int) -> tuple[list[str], list[str]]:
    """Every bind after which the node held more of the pods than the capacity last accepted
    before it (`first` before any), as (over-commits, in flight). A bind the API server
    committed before the fence taken right after a PUT's answer counts as before the answer
    (the benefit of the doubt, a few milliseconds). In flight: a bind after the answer but
    before any of the node's pods left. kube-scheduler places these pods itself, from its
    cache: a pod it placed against the old capacity before its watch brought the new one is
    bound after the answer (the 200 says the node shows it, not that kube-scheduler has seen
    it), and nothing the extender does can stop that bind. Once a pod has left, it has: a pod
    bound into the unit it freed is an over-commit."""
    order = sorted(steps, key=lambda s: (s.rv, s.kind == "capacity"))
    cap, held, since, left_since = first, 0, 0.0, True
    over: list[str] = []
    in_flight: list[str] = []
    for s in order:
        if s.kind == "capacity":
            cap, since, left_since = int(s.what), s.at, False
        elif s.kind == "leave":
            held -= 1
            left_since = True
        else:
            held += 1
            if held > cap:
                (over if left_since else in_flight).append(
                    f"{s.what} bound (seen {1000 * (s.at - since):.0f} ms after "
                    f"the capacity {cap} was accepted) made {held} on the node"
                )
    return over, in_flight
