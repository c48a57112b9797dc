"""Preference: soft constraints and bin-packing as prioritize scores.

A pod states what it prefers in annotations under the resource domain (escher.io):

- `escher.io/prefer: <alt>,<alt>,...`: ordered alternatives, each a node label `key=value`
  or an ephemeral resource (short or full name) with a unit free on the node. The feasible
  nodes of the best alternative any of them satisfies score 10, the rest 0.
- `escher.io/pack: <resource>`: the feasible node where the resource is most used (ties: by
  name) scores 10, the rest 0: each pod goes where the previous ones went, until that node
  is full.

kube-scheduler asks prioritize only about nodes that passed every filter, so "best
feasible" is exact and a full node is never preferred. Its weight in the registry
(extender.scheduling.registry) keeps a preferred node at 10 and the others at 0 once
EphemeralResourceFit's score is added in, and 10 (x10 by the extender's weight: 100 points)
outweighs the spread of NodeResourcesFit's least-allocated. This is the soft-constraint ESL's
extender approach (extender.esl.soft, extender.esl.binpack): no timeout, no resubmission.

Pods without these annotations, or whose alternatives no offered node has, get no score from
this plugin. Run by extender.scheduling.verbs through the registry; reads the ledger only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from extender.core.ledger import Ledger, NodeView
from extender.core.pod import PodInfo
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

    def relevant(self, pod: PodInfo, ledger: Ledger) -> bool:
        return bool(pod.marks)  # most pods have none: prioritize is called for every one

    def score(self, pod: PodInfo, nodes: Sequence[str], ledger: Ledger) -> Mapping[str, int]:
        pack = pod.marks.get(ledger.prefix + "pack", "").strip()
        if pack:
            return self._pack(pack, nodes, ledger)
        prefer = pod.marks.get(ledger.prefix + "prefer", "")
        alts = [a.strip() for a in prefer.split(",") if a.strip()]
        return self._prefer(alts, nodes, ledger) if alts else {}

    @staticmethod
    def _prefer(alts: list[str], nodes: Sequence[str], ledger: Ledger) -> dict[str, int]:
        rank: dict[str, int] = {}
        for n in nodes:
            view = ledger.node(n)
            if view is not None:
                rank[n] = next(
                    (i for i, a in enumerate(alts) if matches(a, view, ledger.prefix)), len(alts)
                )
        best = min(rank.values(), default=len(alts))
        if best == len(alts):
            return {}  # no feasible node has any alternative: no preference to express
        return {n: MAX_SCORE for n, r in rank.items() if r == best}

    @staticmethod
    def _pack(pack: str, nodes: Sequence[str], ledger: Ledger) -> dict[str, int]:
        resource = pack if "/" in pack else ledger.prefix + pack
        fullest = ledger.most_used(resource, nodes)
        return {} if fullest is None else {fullest: MAX_SCORE}
