"""EphemeralResourceFit: the ledger's answer to "does this node have room?".

The filter is kube-scheduler's NodeResourcesFit for the ephemeral resources the extender
owns, counted against the ledger, which also holds pods accepted at bind but not yet bound
and is the truth when a capacity was lowered before the nodes show it. The scorer prefers
nodes where the requested ephemeral resources are least used, as NodeResourcesFit's
LeastAllocated does for cpu and memory. Run by extender.scheduling.verbs through the registry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from extender.core.ledger import Ledger
from extender.core.plugins import PASS, Verdict
from extender.core.pod import PodInfo, Rejection
from extender.wire import MAX_SCORE

NAME = "EphemeralResourceFit"


class EphemeralResourceFit:
    name = NAME

    def relevant(self, pod: PodInfo, ledger: Ledger) -> bool:
        return bool(pod.ephemeral)  # filter and score alike: a pod of none has no say here

    def filter(self, pod: PodInfo, nodes: Sequence[str], ledger: Ledger) -> Verdict:
        rejected = {
            node: Rejection(str(s), s.unresolvable)
            for node, s in ledger.shortfalls(nodes, pod.ephemeral).items()
        }
        return Verdict(rejected) if rejected else PASS

    def score(self, pod: PodInfo, nodes: Sequence[str], ledger: Ledger) -> Mapping[str, int]:
        return ledger.least_allocated(nodes, pod.ephemeral, MAX_SCORE)
