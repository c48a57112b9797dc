"""The extender service's parts, wired together, started in order and stopped.

The composition root: the only module that knows every part. It builds the ledger, the gang
manager, the plugins, the verbs, the authorizer and, in the modes that talk to the API (all
but standalone), the Kubernetes adapters that settings.mode calls for, as one typed bundle
(extender.cluster.build: the cluster view, the write-back, leader election and, in the
extender mode, the binder, the gate lifter and the waker of pods turned away). extender.app
serves it (it is the HTTP layer's Runtime); its `start()` and `stop()` run in the app's
lifespan, on the event loop.

Start-up order is what makes a restart lossless: the ledger is first built from the nodes'
written resources and the pods (the cluster holds the durable truth); only then do the
watches, the write-back and leadership start, and the service report ready. Each step is
retried with backoff until it succeeds, and until then every verb and policy call answers
503 (kube-scheduler retries). A misconfiguration that retrying cannot fix (leader election
without the RBAC for leases) fails the start with a message naming it.

Concurrency (docs/architecture.md): decisions, the watches, the write-back, the gang manager
and leader election all run on the event loop; work proportional to the nodes (the policy
API, ESL steps) runs in worker threads against the thread-safe ledger, whose lock is held
only for what a change touches. Nothing on the loop waits for I/O or a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any

from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential

from extender import loopwatch
from extender.cluster.auth import Authorizer
from extender.core.access import AuthDecision
from extender.core.events import PodChange, PodEvent, PodEvents
from extender.core.ledger import HolderKind, Ledger
from extender.core.pod import Keys, PodInfo
from extender.esl.backends import LedgerBackend
from extender.esl.base import UNBOUNDED, UNBOUNDED_DRA
from extender.esl.registry import Instances
from extender.gang.declarations import Declarations
from extender.gang.gate import GangGate
from extender.gang.manager import GangManager
from extender.gang.plugin import GangFilter
from extender.gang.state import Phase
from extender.gang.turns import Turns
from extender.metrics import Metrics
from extender.policies.api import ResourceSpec
from extender.policies.store import MemoryStore, PolicyStore
from extender.preference.nominations import Nominations
from extender.scheduling import registry
from extender.scheduling.requeue import Requeue
from extender.scheduling.verbs import FilteredPods, Verbs
from extender.settings import Settings

if TYPE_CHECKING:  # the standalone mode imports none of the Kubernetes adapters
    from extender.cluster.build import KubeParts
    from extender.kube.client import KubeAPI

log = logging.getLogger(__name__)


class StartupError(Exception):
    """The service cannot start as configured; the message says why."""


class Service:
    def __init__(
        self,
        settings: Settings,
        api: KubeAPI | None = None,
        *,
        on_built: Callable[[], None] | None = None,
    ) -> None:
        self.settings = s = settings
        # Called once, on the loop, when the ledger is built and before the service reports
        # ready (extender.server freezes the startup state there: extender.collector).
        self._on_built = on_built
        self.metrics = Metrics()
        self.ledger = Ledger(s.resource_domain)
        self.keys = Keys.for_domain(s.resource_domain)
        self.events = PodEvents()
        # Gangs declared as PodGroups (filled by the gang's Kubernetes side); a group that
        # changes hands the pods naming it back to the gang manager.
        self.declarations = Declarations()
        self.gangs = GangManager(self.ledger, self.keys, s.gang, groups=self.declarations)
        self.events.subscribe(self.declarations.on_pod)
        filtered = FilteredPods(s.scheduling.filtered_max_pods, s.scheduling.filtered_max_bytes)
        self.gate = GangGate(self.gangs, s.gang)
        self.declarations.on_change = self._redeclared
        self.events.subscribe(self.gangs.on_pod)
        self.events.subscribe(self.gate.on_pod)  # after the manager: it reads its members
        self.events.subscribe(filtered.on_pod)
        # ESLs created over HTTP (/v1/esl) or as objects, each on its own LedgerBackend.
        self.esls = Instances(self._esl_backend, limit=s.max_esl_instances)
        self.kube: KubeParts | None = self._build_kube(api) if s.kube else None
        requeue: Requeue | None = None
        k = self.kube
        if k is not None and k.gang is not None:
            self.gangs.nominate = k.gang.nominator
        # Pods stating a preference, nominated for their preferred node (extender mode).
        self.preferences = Nominations(self.ledger, self.keys, s.preference, self.may_write)
        if k is not None and k.preferences is not None:
            self.preferences.write = k.preferences
            self.events.subscribe(self.preferences.on_pod)
        if k is not None and k.scheduling is not None and k.scheduling.waker is not None:
            requeue = Requeue(
                k.scheduling.waker,
                s.scheduling.requeue_window_seconds,
                s.scheduling.requeue_max_pods,
            )
            self.events.subscribe(requeue.on_pod)
        self.authorizer = Authorizer(
            k.api if k is not None and s.kubernetes_auth else None,
            s.resource_domain,
            s.token,
            s.auth_cache_seconds,
        )
        handle = registry.Handle(self.ledger, self.keys, self.gangs)
        self.verbs = Verbs(
            self.ledger,
            self.keys,
            self.gangs,
            # Gangs need the pod informer and bind: the standalone mode has neither.
            registry.build_filters(handle, without=() if s.kube else (GangFilter.name,)),
            registry.build_scorers(handle),
            k.scheduling.binder if k is not None and k.scheduling is not None else None,
            learn_nodes=not s.kube,
            max_learned_nodes=s.scheduling.max_learned_nodes,
            gang_wait_seconds=s.gang.wait_seconds,
            answers=Turns(s.scheduling.bind_answers_per_turn),
            filtered=filtered,
            requeue=requeue,
        )
        self.store: PolicyStore = (
            k.store
            if k is not None and k.store is not None
            else MemoryStore(
                self.ledger, s.resource_domain, self.esls, self.wait_durable, not s.kube
            )
        )
        self.metrics.on_scrape(self._gauges)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self._failed: str | None = None
        self._stopping = threading.Event()

    def _build_kube(self, api: KubeAPI | None) -> KubeParts:
        """The Kubernetes side (`api` replaces the client the settings give: tests)."""
        # Imported here: the standalone mode loads no Kubernetes client at all.
        from extender.cluster import build
        from extender.kube.handle import Handle

        s = self.settings
        api = api or build.client(s)
        handle = Handle(
            api, s.resource_domain, self.ledger, self.keys, self.metrics, self.may_write
        )
        return build.build(
            s,
            handle,
            self.events,
            self._leadership,
            self.esls,
            self._esl_backend,
            self.wait_durable,
            self.declarations,
        )

    # ---- the HTTP layer's Runtime ------------------------------------------------------------

    def may_write(self) -> bool:
        """Whether this replica may decide and write: it leads, or runs alone."""
        elector = self.kube.elector if self.kube is not None else None
        return elector is None or elector.is_leader()

    def ready(self) -> tuple[bool, str]:
        if not self._started:
            return False, self._failed or "building the ledger from the cluster"
        if not self.may_write():
            elector = self.kube.elector if self.kube is not None else None
            holder = elector.holder if elector is not None else ""
            return False, f"not the leader ({holder or 'no leader'} holds the lease)"
        return True, "ok"

    def accepting(self) -> tuple[bool, str]:
        elector = self.kube.elector if self.kube is not None else None
        if elector is not None and not elector.renewing():
            return False, (
                "this replica's lease renewals are not answered (is the API server away?): "
                "a change taken now might be dropped with the lease before it reached the "
                "nodes, so none is taken; nothing was changed"
            )
        return True, "ok"

    def alive(self) -> tuple[bool, str]:
        for task in self._tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                return False, f"task {task.get_name()} failed: {task.exception()}"
        return True, "ok"

    async def wait_durable(self, version: int, nodes: list[str]) -> bool:
        if self.kube is None:
            return True
        return await self.kube.writeback.wait_durable(
            version, nodes, self.settings.writeback.wait_seconds
        )

    async def authorize(self, token: str | None, verb: str, target: str) -> AuthDecision:
        return await self.authorizer.decide(token, verb, target)

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start in the background: ready once the ledger is built. Leader election's
        misconfigurations fail here, at once."""
        self._loop = asyncio.get_running_loop()
        k = self.kube
        if k is not None and k.elector is not None:
            from extender.cluster.leader import LeaderElectionError

            try:
                await k.elector.check()
            except LeaderElectionError as e:
                raise StartupError(str(e)) from None
        self._spawn(
            loopwatch.watch(self.metrics, self.settings.loop_watch_interval_seconds), "loop-watch"
        )
        self._spawn(self._expire_gangs(), "gang-expiry")
        if k is not None and k.gang is not None:
            lifter, switch = k.gang.lifter, k.gang.switch
            may_lift = lambda: self._started and self.may_write()  # noqa: E731
            setting = switch.set if switch is not None else None
            self._spawn(self.gate.run(lifter, setting, may_lift, lifter.tell), "gang-gate")
        threading.Thread(
            target=self.esls.run, args=(self._stopping,), name="esl-steps", daemon=True
        ).start()
        if k is None:
            self._built()
            self._started = True
            self.metrics.is_leader.set(1)
            return
        self._spawn(self._start_kube(k), "startup")

    async def _start_kube(self, k: KubeParts) -> None:
        from extender.kube.client import ApiError

        retrying = AsyncRetrying(
            wait=wait_exponential(multiplier=0.2, max=10.0),
            retry=retry_if_exception_type(ApiError),
            before_sleep=lambda state: self._startup_failed(state.outcome),
        )
        async for attempt in retrying:
            with attempt:
                await k.view.sync()
                await k.writeback.sync()
                if k.store is not None:
                    await k.store.sync()
                if k.gang is not None:
                    await k.gang.podgroups.sync()  # a kind not served is no error
        self._failed = None
        self._spawn(k.view.nodes.run(), "watch-nodes")
        self._spawn(k.view.pods.run(), "watch-pods")
        self._spawn(k.writeback.run(), "writeback")
        for informer in k.writeback.informers():
            self._spawn(informer.run(), f"watch-{informer.name}")
        if k.store is not None:
            self._spawn(k.store.run(), "policy-objects")
        if k.gang is not None:
            self._spawn(k.gang.podgroups.run(), "watch-podgroups")
        if k.elector is not None:
            self._spawn(k.elector.run(), "leader-election")
        else:
            self.metrics.is_leader.set(1)
            k.writeback.verify_all()
            if k.store is not None:
                k.store.leading(True)
        self._built()
        self._started = True
        log.info("ready", extra={"nodes": len(self.ledger.node_names())})

    def _built(self) -> None:
        if self._on_built is not None:
            self._on_built()

    def _startup_failed(self, outcome: Any) -> None:
        e = outcome.exception() if outcome is not None else None
        reason = getattr(e, "reason", "error")
        self.metrics.startup_failures.labels("sync", reason).inc()
        self._failed = f"building the ledger from the cluster failed ({reason}): {e}; retrying"
        log.warning(self._failed)

    def _leadership(self, leading: bool) -> None:
        self.metrics.is_leader.set(1 if leading else 0)
        self.metrics.leader_changes.labels("leader" if leading else "follower").inc()
        k = self.kube
        if k is None:
            return
        if k.gang is not None and k.gang.switch is not None and not leading:
            k.gang.switch.forget()
        if k.store is not None:
            k.store.leading(leading)
        if leading:
            k.writeback.verify_all()
            return
        dropped = k.writeback.abandon()
        if dropped:
            log.warning(
                "stepped down with changes not yet on the nodes: dropped, the nodes' values stand",
                extra={"nodes": dropped},
            )

    async def _expire_gangs(self) -> None:
        while True:
            await asyncio.sleep(self.settings.gang.expiry_interval_seconds)
            released = self.gangs.expire()
            if released:
                log.info("gang reservations expired", extra={"gangs": released})

    def _redeclared(self, pods: Iterable[PodInfo]) -> None:
        """A PodGroup changed: its pods are learnt again, by the manager then the gate."""
        pods = list(pods)
        self.gangs.redeclared(pods)
        for pod in pods:
            self.gate.on_pod(PodEvent(PodChange.UPSERT, pod.uid, pod))

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(coro, name=name))

    async def stop(self) -> None:
        self._stopping.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        k = self.kube
        if k is None:
            return
        await k.aclose()
        if k.elector is not None and self._started:
            with contextlib.suppress(TimeoutError):  # the API server away: the lease expires
                async with asyncio.timeout(self.settings.leader_election.retry_period_seconds):
                    await k.elector.release()
        await k.api.aclose()

    # ---- ESLs in worker threads ------------------------------------------------------------

    def _esl_backend(
        self,
        claim: Callable[[str, ResourceSpec], None] | None = None,
        release: Callable[[str], None] | None = None,
    ) -> LedgerBackend:
        s, loop = self.settings, self._loop

        def wait(version: int, nodes: list[str]) -> bool:
            # Called from an ESL's worker thread: waits there, the loop is not held.
            if loop is None:
                return True
            future = asyncio.run_coroutine_threadsafe(self.wait_durable(version, nodes), loop)
            return bool(future.result(timeout=s.writeback.wait_seconds + 5))

        return LedgerBackend(
            self.ledger,
            s.resource_domain,
            wait=wait if self.kube is not None else None,
            learn=not s.kube,
            in_path=s.binds,  # extender mode: the extender is in kube-scheduler's path
            claim=claim,
            release=release,
            hierarchy=s.gang.hierarchy,  # what a gang ESL's topology names
            unbounded=UNBOUNDED_DRA if s.mode == "dra" else UNBOUNDED,
        )

    # ---- metrics -------------------------------------------------------------------------------

    def _gauges(self) -> None:
        m, totals = self.metrics, self.ledger.totals()
        m.ledger_nodes.set(totals.nodes)
        m.ledger_resources.set(totals.resources)
        m.ledger_version.set(totals.version)
        for kind in HolderKind:
            m.ledger_holdings.labels(kind.value).set(totals.holdings.get(kind, 0))
        phases = dict.fromkeys(Phase, 0)
        for g in self.gangs.gangs():
            phases[g.phase] += 1
        for phase, n in phases.items():
            m.gangs.labels(phase.value).set(n)
        m.filtered_pods.set(len(self.verbs.filtered))
        m.esl_instances.set(len(self.esls))
