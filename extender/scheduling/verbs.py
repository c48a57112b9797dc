"""The extender verbs: filter, prioritize, bind and preempt, decided over the ledger.

Called by the HTTP routes (extender.http.verbs) with decoded wire types; runs the filter
and score plugins it is given (extender.scheduling.registry builds them), the gang barrier at
bind (extender.gang), and preemption (extender.scheduling.preemption). The Binder
(extender.scheduling.kube.binder in kube mode, none in standalone mode) creates the Binding.

The hot path. kube-scheduler calls filter and prioritize for every pod of its profile, one
pod at a time, inside its scheduling cycle, so whatever they cost is taken from the cluster's
throughput. A pod that requests no ephemeral resource, belongs to no gang and states no
preference gets its answer without a look at the nodes when no gang holds a reservation
(and only the reserved nodes are looked at when some does); prioritize answers such a pod
with an empty list, which kube-scheduler adds nothing for.

Why bind holds first: kube-scheduler binds asynchronously, so after filter said "fits" for
pod A, pod B may be filtered and told the same before A is bound. Holding A's place in the
ledger at bind, atomically with the capacity check, means B's bind is refused (and B
retried) rather than over-committing the node. Bind only binds a pod this extender filtered,
by its UID (the Binding's precondition), to a node it knows.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from extender.core.errors import CoreError
from extender.core.events import PodChange, PodEvent
from extender.core.ledger import HolderKind, Ledger
from extender.core.names import check_node_name
from extender.core.objects import Pod
from extender.core.plugins import FilterPlugin, Verdict, Weighted
from extender.core.pod import Keys, PodInfo, Rejection, pod_info
from extender.core.quantity import InvalidQuantity
from extender.gang import Gangs
from extender.gang.barrier import Wake
from extender.gang.state import Refused, Ticket
from extender.gang.turns import Turns
from extender.scheduling import preemption
from extender.scheduling.requeue import Requeue
from extender.wire import (
    MAX_SCORE,
    BadRequest,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
    HostPriority,
    MetaPod,
    MetaVictims,
    NodeList,
    node_names,
)


class BindError(Exception):
    """Creating a Binding failed; the message says why (Binder implementations raise it)."""


class Binder(Protocol):
    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Bind the pod to `node` if it is still the pod with `uid`; raise BindError."""
        ...


class FilteredPods:
    """The pods filter saw and bind may still be asked for, by uid: bounded by count, by an
    estimate of their size and by age (kube-scheduler binds within seconds of its filter, and
    filters a pending pod again at each retry), oldest forgotten first; a pod leaves once
    bound or gone."""

    def __init__(
        self,
        max_pods: int,
        max_bytes: int,
        max_age: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_pods = max_pods
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.clock = clock
        self._pods: OrderedDict[str, tuple[PodInfo, int, float]] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._pods)

    def remember(self, pod: PodInfo) -> None:
        if not pod.uid:
            return
        self.forget(pod.uid)
        size, now = _size(pod), self.clock()
        self._pods[pod.uid] = (pod, size, now)
        self.bytes += size
        while self._pods:
            _, dropped, at = next(iter(self._pods.values()))
            full = len(self._pods) > self.max_pods or self.bytes > self.max_bytes
            if not full and now - at <= self.max_age:
                break
            self._pods.popitem(last=False)
            self.bytes -= dropped

    def get(self, uid: str) -> PodInfo | None:
        entry = self._pods.get(uid)
        if entry is None or self.clock() - entry[2] > self.max_age:
            return None
        return entry[0]

    def forget(self, uid: str) -> None:
        entry = self._pods.pop(uid, None)
        if entry is not None:
            self.bytes -= entry[1]

    def on_pod(self, event: PodEvent) -> None:
        """Subscribed to the cluster view: a bound or gone pod needs no bind any more."""
        if event.change is PodChange.GONE or event.pod is None or event.pod.node:
            self.forget(event.uid)


def _size(pod: PodInfo) -> int:
    """A generous estimate of what a PodInfo costs in memory, in bytes."""
    strings = len(pod.uid) + len(pod.namespace) + len(pod.name) + len(pod.gang)
    strings += sum(len(k) + len(v) for k, v in pod.marks.items())
    strings += sum(len(k) + 16 for k in pod.requests) * 2
    constraints = 0
    if pod.constraints is not None:
        c = pod.constraints
        constraints = 200 * (len(c.tolerations) + len(c.node_selector) + len(c.terms or ()))
    return 600 + 2 * strings + constraints


@dataclass(frozen=True, slots=True)
class Filtered:
    """Filter's reply, and how many nodes the request named (a reply may name fewer: those
    a final verdict leaves out)."""

    reply: ExtenderFilterResult
    named: int


class Verbs:
    def __init__(
        self,
        ledger: Ledger,
        keys: Keys,
        gangs: Gangs,
        filters: Sequence[FilterPlugin],
        scorers: Sequence[Weighted],
        binder: Binder | None,
        *,
        learn_nodes: bool = False,
        max_learned_nodes: int = 10_000,
        gang_wait_seconds: float = 60.0,
        answers: Turns | None = None,
        filtered: FilteredPods | None = None,
        requeue: Requeue | None = None,
    ) -> None:
        self.ledger = ledger
        self.keys = keys
        self.gangs = gangs
        self.filters = filters
        self.scorers = scorers
        self.binder = binder
        # Standalone mode: nodes are known only from the requests themselves.
        self.learn_nodes = learn_nodes
        self.max_learned_nodes = max_learned_nodes
        # Below kube-scheduler's httpTimeout for the extender, or kube-scheduler gives up first.
        self.gang_wait_seconds = gang_wait_seconds
        # Gang members' bind calls in flight (at the barrier, or binding after it opened): while
        # there are, the process defers its full garbage collections, which would walk every
        # one of a burst's (extender.collector).
        self.members_binding = 0
        # A bind burst's Bindings come back in waves: their answers go out a few to a turn of
        # the loop (extender.gang.turns), so that no turn holds it for a whole wave.
        self.answers = answers if answers is not None else Turns(16)
        self.filtered = filtered if filtered is not None else FilteredPods(50_000, 64 << 20)
        # Pods turned away for ephemeral resources, woken when one frees (extender mode).
        self.requeue = requeue

    # ---- pods ------------------------------------------------------------------------------

    def pod(self, raw: Pod, field: str = "Pod") -> PodInfo:
        """What the decisions read of a pod in a request; BadRequest naming the field."""
        try:
            return pod_info(raw, self.keys, self.ledger.prefix)
        except (InvalidQuantity, CoreError) as e:
            # The message names the field relative to the pod; say where the pod is.
            where = f"{field}.{e.field}" if e.field else field
            message = str(e)
            if e.field and message.startswith(e.field):
                message = message[len(e.field) :].lstrip(": ")
            raise BadRequest(f"{where}: {message}", where) from None

    def _names(self, args: ExtenderArgs) -> list[str]:
        names = node_names(args)
        if self.learn_nodes and (new := self.ledger.unknown(names)):
            for n in new:
                try:
                    check_node_name(n)
                except CoreError as e:
                    i = names.index(n)
                    field = f"NodeNames[{i}]" if args.node_cache_capable else f"Nodes[{i}]"
                    raise BadRequest(f"{field}: {e}", field) from None
            room = self.max_learned_nodes - len(self.ledger.node_names())
            if room > 0:
                self.ledger.learn_nodes(new[:room])
        return names

    # ---- filter ----------------------------------------------------------------------------

    async def filter(self, args: ExtenderArgs) -> Filtered:
        pod = self.pod(args.Pod)  # first: a request refused for its pod changes nothing
        names = self._names(args)
        if self.binder is not None:  # only a binding extender is asked to bind it later
            self.filtered.remember(pod)
        plugins = [p for p in self.filters if p.relevant(pod, self.ledger)]
        if not plugins:  # no plugin's business: every node passes, none is looked at
            return Filtered(_filter_reply(args, names, names, {}), len(names))
        failed: dict[str, Rejection] = {}
        remaining: Sequence[str] = names
        for plugin in plugins:
            decided = plugin.filter(pod, remaining, self.ledger)
            verdict = decided if isinstance(decided, Verdict) else await decided
            if verdict.only is not None:
                remaining = verdict.only  # the rest are turned away, and left out of the reply
                break
            if verdict.rejected:
                failed.update(verdict.rejected)
                remaining = [n for n in remaining if n not in verdict.rejected]
            if verdict.final or not remaining:
                break
        if not remaining and self.requeue is not None:
            self.requeue.turned_away(pod)
        return Filtered(_filter_reply(args, names, remaining, failed), len(names))

    # ---- prioritize ------------------------------------------------------------------------

    def prioritize(self, args: ExtenderArgs) -> list[HostPriority]:
        pod = self.pod(args.Pod)
        names = node_names(args)  # checked even when unread: a malformed request is a 400
        return weighted_scores(self.scorers, pod, names, self.ledger)

    # ---- bind ------------------------------------------------------------------------------

    async def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        """Hold the pod's place (or wait for its gang), then bind it."""
        if self.binder is None:
            return ExtenderBindingResult(Error="binding is disabled (standalone or pure mode)")
        if not args.PodUID:
            raise BadRequest("PodUID is required: it is the Binding's precondition", "PodUID")
        ns, name, uid, node = args.PodNamespace, args.PodName, args.PodUID, args.Node
        what = f"pod {ns}/{name} ({uid})"
        pod = self.filtered.get(uid)
        if pod is None:
            return ExtenderBindingResult(Error=f"{what} was not filtered by this extender")
        if (pod.namespace, pod.name) != (ns, name):
            return ExtenderBindingResult(Error=f"{what}: the uid belongs to pod {pod.key}")
        if self.ledger.node(node) is None:
            return ExtenderBindingResult(Error=f"{what}: node {node[:253]!r} is not known")
        ticket = self.gangs.arrive(uid, node)
        if isinstance(ticket, Refused):
            return ExtenderBindingResult(Error=ticket.reason)
        if ticket is None:
            short = self.ledger.hold(
                uid, node, pod.requests, HolderKind.ASSUMED, priority=pod.priority
            )
            if short is not None:
                return ExtenderBindingResult(Error=f"{what} no longer fits: {short.detail}")
            return await self._bind(what, ns, name, uid, node, None)
        self.members_binding += 1
        try:
            return await self._bind(what, ns, name, uid, node, ticket)
        finally:
            self.members_binding -= 1

    async def _bind(
        self, what: str, ns: str, name: str, uid: str, node: str, ticket: Ticket | None
    ) -> ExtenderBindingResult:
        """Wait at the gang's barrier (a member), then create the Binding."""
        assert self.binder is not None
        if ticket is not None:
            woken = await ticket.barrier.wait(uid, self.gang_wait_seconds)
            if woken.wake is not Wake.OPEN:
                # A cancelled barrier (the reservation expired) wakes every held member at
                # once: their refusals go out a few to a turn, as the bound members' answers.
                await self.answers.take()
                return ExtenderBindingResult(Error=f"{what}: gang {ticket.gang}: {woken.reason}")
        try:
            await self.binder.bind(ns, name, uid, node)
        except BindError as e:
            if ticket is None:
                self.ledger.release(uid)
            return ExtenderBindingResult(Error=str(e))
        self.filtered.forget(uid)
        if ticket is not None:
            self.gangs.bound(uid, node)
            await self.answers.take()
        return ExtenderBindingResult()

    # ---- preempt ---------------------------------------------------------------------------

    def preempt(self, args: ExtenderPreemptionArgs) -> ExtenderPreemptionResult:
        """Per candidate node, the victims that free what the preemptor needs; nodes where
        evicting cannot help are dropped."""
        pod = self.pod(args.Pod)
        proposed: dict[str, tuple[list[str], int]] = {}
        if args.NodeNameToMetaVictims is not None:
            for node, mv in args.NodeNameToMetaVictims.items():
                proposed[node] = ([p.UID for p in mv.Pods], mv.NumPDBViolations)
        elif args.NodeNameToVictims is not None:
            for node, v in args.NodeNameToVictims.items():
                proposed[node] = ([p.metadata.uid for p in v.Pods], v.NumPDBViolations)
        out: dict[str, MetaVictims] = {}
        for node, (uids, pdb) in proposed.items():
            chosen = preemption.victims(self.ledger, pod, node, uids)
            if chosen:
                out[node] = MetaVictims(Pods=[MetaPod(UID=u) for u in chosen], NumPDBViolations=pdb)
        return ExtenderPreemptionResult(NodeNameToMetaVictims=out)


def weighted_scores(
    scorers: Sequence[Weighted], pod: PodInfo, nodes: Sequence[str], ledger: Ledger
) -> list[HostPriority]:
    """Prioritize's answer: per node, the sum of weight x score over the scorers that had
    something to say (a non-empty answer), divided by the sum of their weights and rounded,
    so 0..MAX_SCORE, as kube-scheduler weighs its score plugins; only the nodes scoring above
    0 (kube-scheduler adds an extender's scores to its own: a node left out and a node scoring
    0 are the same to it, and an empty list is neutral). Empty at once for a pod no scorer has
    anything to say about (none finds it `relevant`)."""
    said: list[tuple[int, Mapping[str, int]]] = [
        (w.weight, m)
        for w in scorers
        if w.plugin.relevant(pod, ledger) and (m := w.plugin.score(pod, nodes, ledger))
    ]
    if not said:
        return []
    if len(said) == 1:  # the common case: one lookup per offered node, the weight cancels out
        scores = said[0][1]
        pairs = zip(nodes, map(scores.get, nodes), strict=True)
        return [
            HostPriority(Host=n, Score=s if s <= MAX_SCORE else MAX_SCORE) for n, s in pairs if s
        ]
    total = sum(w for w, _ in said)
    # Scorers answer sparse (a preference: its best nodes) or dense (least-allocated: every
    # node). A node that only the largest answer names scores at most its weight x MAX_SCORE
    # / total: if that rounds to 0, only the nodes the other answers name can score, and the
    # sum is taken over those alone (at 5,000 nodes, one node instead of 5,000).
    largest = max(range(len(said)), key=lambda i: len(said[i][1]))
    if 2 * said[largest][0] * MAX_SCORE < total:
        offered = set(nodes) if len(nodes) > 64 else nodes
        names: Iterable[str] = [
            n for i, (_, m) in enumerate(said) if i != largest for n in m if n in offered
        ]
        names = dict.fromkeys(names)
    else:
        names = nodes
    out = []
    gets = [(w, m.get) for w, m in said]
    for n in names:
        s = round(sum(w * get(n, 0) for w, get in gets) / total)
        if s:
            out.append(HostPriority(Host=n, Score=s if s <= MAX_SCORE else MAX_SCORE))
    return out


def _filter_reply(
    args: ExtenderArgs, names: Sequence[str], passed: Sequence[str], failed: dict[str, Rejection]
) -> ExtenderFilterResult:
    soft = {n: r.reason for n, r in failed.items() if not r.unresolvable}
    hard = {n: r.reason for n, r in failed.items() if r.unresolvable}
    if args.node_cache_capable:
        return ExtenderFilterResult(
            NodeNames=list(passed), FailedNodes=soft, FailedAndUnresolvableNodes=hard
        )
    assert args.Nodes is not None
    # Not nodeCacheCapable: the reply must carry the passing Node objects themselves.
    items = args.Nodes.items
    if len(passed) != len(items):
        keep = set(passed)
        items = [raw for raw, name in zip(items, names, strict=True) if name in keep]
    nodes = NodeList(
        apiVersion=args.Nodes.apiVersion,
        kind=args.Nodes.kind,
        metadata=args.Nodes.metadata,
        items=items,
    )
    return ExtenderFilterResult(Nodes=nodes, FailedNodes=soft, FailedAndUnresolvableNodes=hard)
