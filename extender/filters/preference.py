"""Preference: soft constraints and bin-packing as prioritize scores.

A pod states what it prefers in annotations under the resource domain (escher.io):

- `escher.io/prefer: <alt>,<alt>,...`: ordered alternatives, each a node label `key=value`
  or an ephemeral resource (short or full name) with a unit free on the node. The feasible
  nodes of the best alternative any of them satisfies score 10, the rest 0.
- `escher.io/pack: <resource>`: the feasible node where the resource is most used (ties: by
  name) scores 10, the rest 0: each pod goes where the previous ones went, until that node
  is full.

kube-scheduler asks prioritize only about nodes that passed every filter, so "best
feasible" is exact and a full node is never preferred; scoring 10 or 0 (x10 by the
extender's weight: 100 points) outweighs the spread of NodeResourcesFit's least-allocated.
This is the soft-constraint ESL's extender approach (extender.esl.soft, extender.esl.binpack):
no timeout, no resubmission.

Pods without these annotations get EphemeralResourceFit's least-allocated score (averaging
two scorers would halve a preference, so this one plugin serves both). Run by
extender.scheduling.verbs through the registry; reads the ledger only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from extender.core.ledger import Ledger, NodeView
from extender.core.pod import PodInfo
from extender.filters.ephemeral import EphemeralResourceFit
from extender.wire import MAX_SCORE

NAME = "Preference"


def matches(alt: str, view: NodeView, prefix: str) -> bool:
    """Whether a node satisfies one alternative: a label `key=value`, or a resource."""
    if "=" in alt:
        key, _, value = alt.partition("=")
        return view.labels.get(key.strip()) == value.strip()
    resource = alt if "/" in alt else prefix + alt
    return view.available(resource) >= 1


class Preference:
    name = NAME

    def __init__(self) -> None:
        self._fit = EphemeralResourceFit()

    def score(self, pod: PodInfo, nodes: Sequence[str], ledger: Ledger) -> Mapping[str, int]:
        pack = pod.marks.get(ledger.prefix + "pack", "").strip()
        prefer = pod.marks.get(ledger.prefix + "prefer", "")
        alts = [a.strip() for a in prefer.split(",") if a.strip()]
        scores = None
        if pack:
            scores = self._pack(pack, nodes, ledger)
        elif alts:
            scores = self._prefer(alts, nodes, ledger)
        return scores if scores is not None else self._fit.score(pod, nodes, ledger)

    @staticmethod
    def _prefer(alts: list[str], nodes: Sequence[str], ledger: Ledger) -> dict[str, int] | None:
        rank: dict[str, int] = {}
        for n in nodes:
            view = ledger.node(n)
            if view is not None:
                rank[n] = next(
                    (i for i, a in enumerate(alts) if matches(a, view, ledger.prefix)), len(alts)
                )
        best = min(rank.values(), default=len(alts))
        if best == len(alts):
            return None  # no feasible node has any alternative: no preference to express
        return {n: MAX_SCORE if rank.get(n) == best else 0 for n in nodes}

    @staticmethod
    def _pack(pack: str, nodes: Sequence[str], ledger: Ledger) -> dict[str, int] | None:
        resource = pack if "/" in pack else ledger.prefix + pack
        used: dict[str, int] = {}
        for n in nodes:
            view = ledger.node(n)
            if view is not None and resource in view.ephemeral:
                used[n] = view.used.get(resource, 0)
        if not used:
            return None
        fullest = min(used, key=lambda n: (-used[n], n))
        return {n: MAX_SCORE if n == fullest else 0 for n in nodes}
