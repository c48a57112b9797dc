"""The extender verbs: filter, prioritize and bind, decided over the ledger.

Called by the HTTP routes (extender.app) with validated wire types; runs the enabled filter
and score plugins (extender.filters) and, for bind, takes the pod's place in the ledger before
asking the Binder (extender.adapters.binder, or none in standalone mode) to bind it.

Why bind holds first: kube-scheduler binds asynchronously, so after filter said "fits" for
pod A, pod B may be filtered and told the same before A is bound. Holding A's place in the
ledger at bind time, atomically with the capacity check, means B's bind is refused (and B
retried) rather than over-committing the node.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from starlette.concurrency import run_in_threadpool

from extender import resources
from extender.filters import FilterPlugin, PodInfo, Rejection, ScorePlugin
from extender.gang import GangBook, GangSpec, InvalidGang, gang_of
from extender.ledger import HolderKind, Ledger
from extender.wire import (
    MAX_SCORE,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    NodeList,
)

# Pods seen by filter, kept for their bind (bounded: pods that never bind age out).
_POD_CACHE_SIZE = 50_000


class BadRequest(ValueError):
    """A call whose content (not its JSON shape) is wrong; the message names the field."""


class Binder(Protocol):
    def get_pod(self, namespace: str, name: str) -> Mapping[str, Any]: ...

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None: ...


class Verbs:
    def __init__(
        self,
        ledger: Ledger,
        domain: str,
        filters: Sequence[FilterPlugin],
        scorers: Sequence[ScorePlugin],
        binder: Binder | None,
        learn_nodes: bool = False,
        gangs: GangBook | None = None,
        gang_wait_seconds: float = 10.0,
    ) -> None:
        self.ledger = ledger
        self.domain = domain
        self.filters = filters
        self.scorers = scorers
        self.binder = binder
        # Standalone mode: nodes are known only from the requests themselves.
        self.learn_nodes = learn_nodes
        self.gangs = gangs
        # How long a gang member's bind waits for the others: below kube-scheduler's
        # httpTimeout for the extender (scheduler-config/extender.yaml), or the wait is cut.
        self.gang_wait_seconds = gang_wait_seconds
        self._barriers: dict[str, asyncio.Event] = {}
        self._pods: OrderedDict[str, PodInfo] = OrderedDict()
        self._pods_lock = threading.Lock()

    # ---- pods --------------------------------------------------------------------------

    def pod_info(self, pod: Mapping[str, Any]) -> PodInfo:
        meta = pod.get("metadata")
        if not isinstance(meta, Mapping):
            raise BadRequest("Pod.metadata is missing or not an object")
        try:
            amounts = resources.pod_amounts(pod)
        except resources.InvalidResource as e:
            raise BadRequest(str(e)) from e
        eph, _ = resources.split(amounts, self.domain)
        return PodInfo(
            uid=str(meta.get("uid") or ""),
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name") or ""),
            labels=meta.get("labels") or {},
            annotations=meta.get("annotations") or {},
            amounts=amounts,
            ephemeral=eph,
            raw=pod,
        )

    def _remember(self, pod: PodInfo) -> None:
        if not pod.uid:
            return
        with self._pods_lock:
            self._pods[pod.uid] = pod
            self._pods.move_to_end(pod.uid)
            while len(self._pods) > _POD_CACHE_SIZE:
                self._pods.popitem(last=False)

    def _recall(self, uid: str) -> PodInfo | None:
        with self._pods_lock:
            return self._pods.pop(uid, None)

    # ---- filter --------------------------------------------------------------------------

    @staticmethod
    def node_names(args: ExtenderArgs) -> list[str]:
        if args.NodeNames is not None:
            return args.NodeNames
        if args.Nodes is not None:
            names = []
            for i, node in enumerate(args.Nodes.items):
                name = (node.get("metadata") or {}).get("name")
                if not isinstance(name, str) or not name:
                    raise BadRequest(f"Nodes.items[{i}].metadata.name is missing")
                names.append(name)
            return names
        raise BadRequest("neither Nodes nor NodeNames is set")

    def filter(self, args: ExtenderArgs) -> ExtenderFilterResult:
        names = self.node_names(args)
        pod = self.pod_info(args.Pod)
        self._remember(pod)
        if self.learn_nodes:
            self.ledger.ensure_nodes(names)
        failed: dict[str, Rejection] = {}
        remaining: Sequence[str] = names
        for plugin in self.filters:
            rejected = plugin.filter(pod, remaining, self.ledger)
            if rejected:
                failed.update(rejected)
                remaining = [n for n in remaining if n not in rejected]
        return _filter_reply(args, remaining, failed)

    # ---- prioritize ----------------------------------------------------------------------

    def prioritize(self, args: ExtenderArgs) -> dict[str, int]:
        """Score per node, 0..MAX_SCORE: the mean of the enabled scorers.

        Plain ints, not HostPriority models: at 1,000 nodes building models cost more than
        deciding. The route serialises them as kube-scheduler's HostPriorityList.
        """
        names = self.node_names(args)
        pod = self.pod_info(args.Pod)
        total = dict.fromkeys(names, 0)
        if not pod.ephemeral or not self.scorers:
            return total
        if len(self.scorers) == 1:  # the common case, without the averaging pass
            scores = self.scorers[0].score(pod, names, self.ledger)
            return {n: min(MAX_SCORE, max(0, scores.get(n, 0))) for n in names}
        for plugin in self.scorers:
            for node, s in plugin.score(pod, names, self.ledger).items():
                if node in total:
                    total[node] += s
        k = len(self.scorers)
        return {node: min(MAX_SCORE, max(0, round(s / k))) for node, s in total.items()}

    # ---- bind ----------------------------------------------------------------------------

    async def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        """Hold the pod's place, wait for its gang if it has one, then bind it.

        The gang barrier waits on the event loop (no thread is held while members gather);
        the API calls run in worker threads.
        """
        if self.binder is None:
            return ExtenderBindingResult(Error="binding is disabled (standalone mode)")
        binder = self.binder
        ns, name, uid, node = args.PodNamespace, args.PodName, args.PodUID, args.Node
        pod = self._recall(uid)
        if pod is None:
            try:
                pod = self.pod_info(await run_in_threadpool(binder.get_pod, ns, name))
            except Exception as e:  # the Binder's typed errors and malformed pods alike
                return ExtenderBindingResult(Error=f"cannot read pod {ns}/{name}: {e}")
        spec = self._gang_spec(pod)
        if spec is not None:
            error = await self._gang_barrier(spec.key, uid, node)
            if error:
                return ExtenderBindingResult(Error=error)
        else:
            short = self.ledger.hold(uid, node, pod.amounts, HolderKind.ASSUMED)
            if short is not None:
                return ExtenderBindingResult(
                    Error=f"pod {ns}/{name} no longer fits: {short.detail}"
                )
        try:
            await run_in_threadpool(binder.bind, ns, name, uid, node)
        except Exception as e:
            self.ledger.release(uid)
            return ExtenderBindingResult(Error=str(e))
        if spec is not None and self.gangs is not None and self.gangs.bound(spec.key, uid):
            self._barriers.pop(spec.key, None)
        return ExtenderBindingResult()

    def _gang_spec(self, pod: PodInfo) -> GangSpec | None:
        if self.gangs is None:
            return None
        try:
            return gang_of(pod, self.gangs.keys)
        except InvalidGang:
            return None  # filter refused it; a bind for it is kube-scheduler's odd retry

    async def _gang_barrier(self, key: str, uid: str, node: str) -> str:
        """Wait until every member of the gang reached bind; an error if it may not bind."""
        assert self.gangs is not None
        everyone, error = self.gangs.arrive(key, uid, node)
        if error:
            return error
        event = self._barriers.get(key)
        if event is None or (event.is_set() and not everyone):
            event = self._barriers[key] = asyncio.Event()  # a new round after an expiry
        if everyone:
            event.set()
            return ""
        try:
            await asyncio.wait_for(event.wait(), self.gang_wait_seconds)
        except TimeoutError:
            self.gangs.leave(key, uid)
            return f"gang {key}: not every member reached bind within {self.gang_wait_seconds:g}s"
        return ""


def _filter_reply(
    args: ExtenderArgs, passed: Sequence[str], failed: Mapping[str, Rejection]
) -> ExtenderFilterResult:
    soft = {n: r.reason for n, r in failed.items() if not r.unresolvable}
    hard = {n: r.reason for n, r in failed.items() if r.unresolvable}
    if args.NodeNames is not None:
        return ExtenderFilterResult(
            NodeNames=list(passed), FailedNodes=soft, FailedAndUnresolvableNodes=hard
        )
    assert args.Nodes is not None
    # Not nodeCacheCapable: the reply must carry the passing Node objects themselves.
    items = (
        args.Nodes.items
        if not failed
        else [n for n in args.Nodes.items if n["metadata"]["name"] not in failed]
    )
    nodes = NodeList(
        apiVersion=args.Nodes.apiVersion,
        kind=args.Nodes.kind,
        metadata=args.Nodes.metadata,
        items=items,
    )
    return ExtenderFilterResult(Nodes=nodes, FailedNodes=soft, FailedAndUnresolvableNodes=hard)
