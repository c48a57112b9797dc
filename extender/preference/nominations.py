"""Preference nominations: each pending pod stating a preference is nominated for the node
it prefers, before its scheduling cycle.

kube-scheduler tries a pod's nominated node first and alone, before it samples or filters
any other (schedule_one.go v1.37, findNodesThatFitPod then evaluateNominatedNode), and with
one feasible node it scores none: a pod whose nominated node fits costs it one node's
filters and no prioritize call, where it otherwise filtered every node (the all-nodes
profile) and sent the extender every feasible name to score. The node is the one the
Preference plugin (extender.filters.preference) would score highest: for `escher.io/pack`
the fullest node of the resource with room for the pod, for `escher.io/prefer` a node of the
first alternative that some node with room satisfies (round-robin among that alternative's
nodes, so they fill evenly). A nomination is a hint, never a decision: a nominated node that
fails kube-scheduler's own filters (a taint, an affinity, room the ledger did not see yet)
costs one node's filters, and the cycle goes on as without one, scoring with prioritize.

Room. kube-scheduler counts nominated pods against every pod of equal or lower priority it
checks on the node, the nominee's own siblings included, so a burst nominated past a node's
room would fail there, each pod then scoring every node. Each nomination therefore counts
the pod's requests against its node until the pod is bound, gone or its nomination cleared:
a node is nominated only if it can take the pod and every pod nominated there already
(ephemeral and physical resources, from the ledger: extender.core.nodeview.first_shortfall).

State, bounded by args.nominate_max_pods and destroyed with its pods: per pending pod with a
preference its nomination (or "" when none is to be made: no node with room satisfies the
preference, or kube-scheduler cleared ours, which is not repeated); per node what its
nominees request; per alternative the nodes that may satisfy it (rebuilt when the ledger's
shape changes). A restart keeps nothing here and loses nothing durable: the nominations are
in the pods' status, and the watch's first list counts each pending one against its node
again (as it counts any nomination kube-scheduler made by preemption).

Gang members are the gang's to nominate (extender.gang.nominations). Subscribed to the pod
events (extender.core.events) by the composition root in extender mode, which sets `write`
(extender.kube.nominator); on the event loop. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from extender.core.events import PodEvent
from extender.core.ledger import Ledger
from extender.core.nodeview import EMPTY, first_shortfall
from extender.core.pod import Keys, PodInfo
from extender.filters.preference import matches
from extender.preference.args import PreferenceArgs

# Write `node` to the pod's status.nominatedNodeName a moment later, if wanted() then.
Write = Callable[[PodInfo, str, Callable[[], bool]], None]

# Nodes fully checked for one pod at most (those a free-unit lookup rules out first are not
# counted): past them the pod gets no nomination, and its cycle scores every node as before.
MAX_CHECKS = 256
# Alternatives whose candidate nodes are kept (per ledger shape); the oldest go first.
MAX_ALTERNATIVES = 64
# Alternatives of one pod looked at, at most: a new one may cost a walk of every node, so a
# pod listing thousands (a 4 KiB annotation) must not hold the event loop for each. A pod
# whose best alternative comes later gets no nomination; prioritize still scores them all.
MAX_ALTERNATIVES_PER_POD = 4


@dataclass(slots=True)
class _Nominated:
    node: str  # "" when the pod is to get none
    requests: Mapping[str, int]  # counted against the node
    arrived: bool = False  # the watch has shown it on the pod


class Nominations:
    def __init__(
        self,
        ledger: Ledger,
        keys: Keys,
        args: PreferenceArgs,
        may_write: Callable[[], bool] = lambda: True,
    ) -> None:
        self._ledger = ledger
        self._keys = keys
        self._max = args.nominate_max_pods
        self._may_write = may_write
        self.write: Write | None = None  # set by the composition root
        self._pods: dict[str, _Nominated] = {}  # pod uid ->
        self._on_node: dict[str, dict[str, int]] = {}  # node -> what its nominees request
        self._candidates: dict[str, list[str]] = {}  # alternative -> nodes, at _shape
        self._cursor: dict[str, int] = {}  # alternative -> where its next walk starts
        self._shape = -1

    def nominated(self, node: str) -> Mapping[str, int]:
        """What the pods nominated for `node` request, summed."""
        return self._on_node.get(node, EMPTY)

    def tracked(self) -> int:
        return len(self._pods)

    # ---- the pod watch -------------------------------------------------------------------

    def on_pod(self, e: PodEvent) -> None:
        pod = e.pod
        if pod is None or pod.node or pod.done or pod.terminating:
            self._forget(e.uid)  # gone, or bound: kube-scheduler's own count takes over
            return
        entry = self._pods.get(pod.uid)
        if entry is not None:
            self._seen(pod, entry)
        elif self._relevant(pod):
            self._new(pod)

    def _relevant(self, pod: PodInfo) -> bool:
        marks = pod.marks
        wants = self._keys.pack in marks or self._keys.prefer in marks
        return wants and not pod.gang and not pod.held

    def _seen(self, pod: PodInfo, entry: _Nominated) -> None:
        """The watch shows a tracked pod: its nomination arrived, or was cleared or replaced
        (kube-scheduler's cycle failed, or preemption nominated elsewhere)."""
        if pod.nominated == entry.node:
            entry.arrived = True
        elif entry.arrived or not entry.node:
            # Count what is there now (nothing, or preemption's node), and nominate no more:
            # a nomination kube-scheduler cleared failed there.
            self._forget(pod.uid)
            self._track(pod.uid, pod.nominated, pod.requests, arrived=True)
        # else: the watch shows a state older than our nomination, which is on its way

    def _new(self, pod: PodInfo) -> None:
        if len(self._pods) >= self._max:
            return
        if pod.nominated:  # kube-scheduler's (preemption), or ours from before a restart
            self._track(pod.uid, pod.nominated, pod.requests, arrived=True)
            return
        write = self.write
        if write is None or not self._may_write():
            return  # a follower: the leader nominates
        node = self.choose(pod)
        self._track(pod.uid, node or "", pod.requests)
        if node is not None:
            uid = pod.uid
            write(pod, node, lambda: self._wanted(uid, node))

    def _wanted(self, uid: str, node: str) -> bool:
        """A delayed nomination is still to be written: the pod is still pending (not bound,
        not gone) and still to be nominated there."""
        entry = self._pods.get(uid)
        return entry is not None and entry.node == node

    def _track(
        self, uid: str, node: str, requests: Mapping[str, int], arrived: bool = False
    ) -> None:
        self._pods[uid] = _Nominated(node, requests, arrived)
        if node:
            held = self._on_node.setdefault(node, {})
            for r, v in requests.items():
                held[r] = held.get(r, 0) + v

    def _forget(self, uid: str) -> None:
        entry = self._pods.pop(uid, None)
        if entry is None or not entry.node:
            return
        held = self._on_node[entry.node]
        for r, v in entry.requests.items():
            left = held.get(r, 0) - v
            if left > 0:
                held[r] = left
            else:
                held.pop(r, None)
        if not held:
            del self._on_node[entry.node]

    # ---- the choice ----------------------------------------------------------------------

    def choose(self, pod: PodInfo) -> str | None:
        """The node to nominate for `pod`: what Preference would score highest among the
        nodes with room for it and the pods nominated there; None if none."""
        prefix = self._ledger.prefix
        pack = pod.marks.get(self._keys.pack, "").strip()
        if pack:
            resource = pack if "/" in pack else prefix + pack
            ranking = self._ledger.ranking(resource)
            return self._first(pod, resource, (name for _, name in ranking))
        prefer = pod.marks.get(self._keys.prefer, "")
        alts = [a for a in (a.strip() for a in prefer.split(",")) if a]
        for alt in alts[:MAX_ALTERNATIVES_PER_POD]:
            if (node := self._next_of(alt, pod)) is not None:
                return node
        return None

    def _next_of(self, alt: str, pod: PodInfo) -> str | None:
        """A node satisfying `alt` with room, round-robin among its candidates."""
        nodes = self._candidates_of(alt)
        if not nodes:
            return None
        start = self._cursor.get(alt, 0) % len(nodes)
        order = nodes[start:] + nodes[:start]
        resource = "" if "=" in alt else (alt if "/" in alt else self._ledger.prefix + alt)
        node = self._first(pod, resource, order, alt)
        if node is not None:
            self._cursor[alt] = (start + order.index(node) + 1) % len(nodes)
        return node

    def _candidates_of(self, alt: str) -> list[str]:
        """The nodes that may satisfy `alt` (its label, or having its resource), computed once
        per ledger shape: a walk of every node, not one per pod."""
        ledger = self._ledger
        if ledger.shape != self._shape:
            self._candidates.clear()
            self._shape = ledger.shape
        nodes = self._candidates.get(alt)
        if nodes is None:
            if len(self._candidates) >= MAX_ALTERNATIVES:
                del self._candidates[next(iter(self._candidates))]
            if "=" in alt:
                key, _, value = alt.partition("=")
                key, value = key.strip(), value.strip()
                nodes = [
                    n
                    for n in ledger.node_names()
                    if (v := ledger.node(n)) is not None and v.labels.get(key) == value
                ]
            else:
                resource = alt if "/" in alt else ledger.prefix + alt
                nodes = list(ledger.nodes_with(resource))
            self._candidates[alt] = nodes
        return nodes

    def _first(
        self, pod: PodInfo, resource: str, nodes: Iterable[str], alt: str = ""
    ) -> str | None:
        """The first of `nodes` (satisfying `alt`, if given) that can take the pod and its
        nominees. `resource` (may be ""): an ephemeral resource every candidate has, whose
        free units rule a node out with one lookup before the full check."""
        ledger, prefix = self._ledger, self._ledger.prefix
        free = ledger.nodes_with(resource) if resource else EMPTY
        want = max(pod.requests.get(resource, 0), 1 if alt else 0)
        checks = 0
        for name in nodes:
            held = self._on_node.get(name, EMPTY)
            if resource and free.get(name, 0) - held.get(resource, 0) < want:
                continue
            checks += 1
            if checks > MAX_CHECKS:
                return None
            view = ledger.node(name)
            if view is None or view.unschedulable or (alt and not matches(alt, view, prefix)):
                continue
            amounts = _sum(pod.requests, held) if held else pod.requests
            if first_shortfall(view, amounts, EMPTY, prefix, physical=True) is None:
                return name
        return None


def _sum(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = dict(a)
    for r, v in b.items():
        out[r] = out.get(r, 0) + v
    return out
