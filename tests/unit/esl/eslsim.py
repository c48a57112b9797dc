"""A cluster simulated in memory for the ESL unit tests: a real Ledger of nodes behind a
LedgerBackend, and a tiny scheduler that places pods one at a time as kube-scheduler would.

A pod fits a node when the node has every resource it requests available (NodeResourcesFit,
over the ephemeral resources as over cpu, memory and pods); among the nodes it fits, the one
with the fewest pods wins (least allocated), then the name. When the backend is in
kube-scheduler's path (`in_path`), the extender's scorers rank the nodes first, as its
prioritize verb does. Placed pods are recorded in the ledger as bound; `finish` releases
one. Imported by the tests of this directory (pytest's prepend mode puts it on the path).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import builders
from builders import info

from extender.core.ledger import Ledger
from extender.core.names import CPU
from extender.core.pod import Keys
from extender.esl.backends import LedgerBackend
from extender.esl.base import PodRequest
from extender.gang.manager import GangManager
from extender.scheduling import registry
from extender.scheduling.verbs import weighted_scores

D = "escher.io"
KEYS = Keys.for_domain(D)
_uid = itertools.count()


class Sim:
    """Nodes node-0.. of `cpu` cores, 64 GiB and 110 pods each, with optional labels."""

    def __init__(
        self,
        nodes: int = 4,
        cpu: int = 4,
        in_path: bool = False,
        labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.ledger = Ledger(D)
        for i in range(nodes):
            name = f"node-{i}"
            physical = {"cpu": cpu * 1000, "memory": 64 << 30, "pods": 110}
            self.ledger.upsert_node(name, dict((labels or {}).get(name, {})), physical)
        self.backend = LedgerBackend(self.ledger, D, in_path=in_path)
        self.where: dict[str, str] = {}  # pod -> node
        self._scorers = registry.build_scorers(
            registry.Handle(self.ledger, KEYS, GangManager(self.ledger, KEYS))
        )

    def place(self, req: PodRequest, cpu: str | None = None) -> str | None:
        """Place one pod asking `req` (and `cpu`, unless `req` sets it); its node, or None
        when no node fits (it stays pending)."""
        name = f"p{next(_uid)}"
        limits = dict(req.limits)
        if cpu and CPU not in limits:
            limits[CPU] = cpu
        pod = info(
            builders.pod(name, limits=limits, labels=req.labels, annotations=req.annotations)
        )
        feasible = []
        for n in sorted(self.ledger.node_names()):
            view = self.ledger.node(n)
            if view is not None and all(view.available(r) >= v for r, v in pod.requests.items()):
                feasible.append(n)
        if not feasible:
            return None
        scores: Mapping[str, int] = {}
        if self.backend.in_path:
            scores = {
                h.Host: h.Score for h in weighted_scores(self._scorers, pod, feasible, self.ledger)
            }
        node = min(feasible, key=lambda n: (-scores.get(n, 0), self.pods_on(n), n))
        self.ledger.observe_bound(name, node, pod.requests)
        self.where[name] = node
        return node

    def place_all(self, req: PodRequest, k: int, cpu: str | None = None) -> list[str | None]:
        return [self.place(req, cpu) for _ in range(k)]

    def pods_on(self, node: str) -> int:
        view = self.ledger.node(node)
        return view.used.get("pods", 0) if view is not None else 0

    def finish(self, node: str | None = None) -> None:
        """One placed pod (on `node`, if given) finishes: it holds nothing any more."""
        name = next(p for p, n in self.where.items() if node in (None, n))
        self.ledger.release(name)
        del self.where[name]

    def finish_all(self) -> None:
        while self.where:
            self.finish()

    def busy(self, node: str, cores: int) -> None:
        """A pod of no ESL takes `cores` of `node`."""
        self.ledger.observe_bound(f"busy-{next(_uid)}", node, {"cpu": cores * 1000, "pods": 1})

    def ours(self) -> set[str]:
        """Every resource of the domain on any node."""
        return {r for v in self.ledger.snapshot().nodes.values() for r in v.ephemeral}

    def capacities(self, resource: str) -> dict[str, int]:
        """`resource`'s capacity per node that has it."""
        snap = self.ledger.snapshot()
        return {n: v.ephemeral[resource] for n, v in snap.nodes.items() if resource in v.ephemeral}
