"""The plugin protocol of filters and scorers, and the verdict a filter returns.

Laid out as kube-scheduler's framework plugins: each plugin has a name and implements Filter
and/or Score over a batch of nodes, and says itself which pods are its business (`relevant`,
as a kube-scheduler plugin's PreFilter returns Skip): the verbs call it for those only, and
answer a pod that no plugin wants without looking at a node. Decisions are values: a filter
returns a Verdict (a Rejection per node it turns away), a scorer an integer 0..10 per node,
which prioritize adds up with the scorer's weight. Implemented by extender.filters and
extender.gang; built from the registries (extender.scheduling.registry) and run by
extender.scheduling.verbs. Plugins read the ledger, never the Kubernetes API.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from extender.core.ledger import Ledger
from extender.core.pod import PodInfo, Rejection


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a filter decided: the nodes it turned away, each with why. `final`: the nodes it
    passed need no other filter's say (a gang member on its reserved node: the reservation
    already holds everything it requests).

    `only`, for a final verdict that passes a few of many nodes: these pass (each one of the
    nodes offered), and every other node offered is turned away with no reason of its own.
    The reply names only them: kube-scheduler drops a node it sent that is neither passed
    nor failed, and a gang member's filter at 5,000 nodes then answers one name rather than
    4,999 reasons that nobody reads (the member is placed)."""

    rejected: Mapping[str, Rejection] = field(default_factory=dict)
    final: bool = False
    only: tuple[str, ...] | None = None

    @classmethod
    def passing_only(cls, *nodes: str) -> Verdict:
        return cls(final=True, only=nodes)

    @classmethod
    def rejecting(cls, nodes: Sequence[str], reason: str, unresolvable: bool = False) -> Verdict:
        """Every node turned away for the one reason (a pod that may go nowhere now)."""
        return cls(dict.fromkeys(nodes, Rejection(reason, unresolvable)))

    def passing(self, nodes: Sequence[str]) -> list[str]:
        """Which of `nodes` (those offered) pass."""
        if self.only is not None:
            return list(self.only)
        return [n for n in nodes if n not in self.rejected]


PASS = Verdict()


class FilterPlugin(Protocol):
    name: str

    def relevant(self, pod: PodInfo, ledger: Ledger) -> bool:
        """Whether `pod` is this filter's business now; if not, it passes every node and
        `filter` is not called. O(1): asked for every pod kube-scheduler sends."""
        ...

    def filter(
        self, pod: PodInfo, nodes: Sequence[str], ledger: Ledger
    ) -> Verdict | Awaitable[Verdict]:
        """Which of `nodes` cannot take `pod`, each with its reason. A plugin whose decision
        needs work too large for the event loop returns an awaitable of it (the gang filter,
        while its gang is planned in a worker thread)."""
        ...


class ScorePlugin(Protocol):
    name: str

    def relevant(self, pod: PodInfo, ledger: Ledger) -> bool:
        """Whether this scorer has anything to say about `pod`; if not, `score` is not
        called. O(1): asked for every pod kube-scheduler sends."""
        ...

    def score(self, pod: PodInfo, nodes: Sequence[str], ledger: Ledger) -> Mapping[str, int]:
        """A score in 0..10 for each of `nodes` (missing nodes score 0). It may hold other
        nodes too, as a live index does: callers read it for the nodes they offered only."""
        ...


@dataclass(frozen=True, slots=True)
class Weighted:
    """An enabled scorer and its weight, as a kube-scheduler profile weighs a score plugin."""

    plugin: ScorePlugin
    weight: int
