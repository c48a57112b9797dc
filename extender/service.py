"""The extender service's parts, wired together and started in the right order.

Builds the ledger, the plugins and verbs and, unless standalone (settings.kube False), the
Kubernetes parts: the cluster view, the write-back and the binder. Created by
extender.app.create_app; its start() runs in the app's lifespan.

Start-up order is what makes a restart lossless: the ledger is first rebuilt from the
written-back node resources and the bound pods (the cluster holds the durable truth), and only
then does the write-back start and the service report ready. Until then policy calls are
refused with 503, so nothing can be decided on a half-built ledger.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, cast

from extender import filters
from extender.esl.backends import LedgerBackend
from extender.esl.registry import Instances
from extender.filters.base import FilterPlugin, PluginContext, ScorePlugin
from extender.gang import GangBook, InvalidGang, Keys, Wake, gang_of
from extender.ledger import HolderKind, Ledger
from extender.metrics import Metrics
from extender.settings import Settings
from extender.verbs import BadRequest, Verbs

log = logging.getLogger(__name__)


class Service:
    def __init__(self, settings: Settings, api_client: Any = None) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.ledger = Ledger(settings.resource_domain)
        self.gangs = GangBook(self.ledger, Keys.for_domain(settings.resource_domain))
        self.view: Any = None
        self.writeback: Any = None
        self.annotator: Any = None
        binder = None
        if settings.kube:
            # Imported here: the standalone mode needs no Kubernetes client at all.
            from extender.adapters.annotator import PodAnnotator
            from extender.adapters.binder import Binder
            from extender.adapters.client import api_client as make_api_client
            from extender.adapters.view import ClusterView
            from extender.adapters.writeback import WriteBack

            api = api_client or make_api_client(
                settings.kubeconfig, in_cluster=settings.in_cluster, pool_size=32
            )
            self.writeback = WriteBack(api, self.ledger, settings, self.metrics)
            self.view = ClusterView(
                api, self.ledger, settings, self.metrics, on_node_drift=self.writeback.mark_dirty
            )
            if settings.bind:
                binder = Binder(api)
                self.annotator = PodAnnotator(api, self.gangs.keys, on_gone=self.gangs.forget)
        ctx = PluginContext(self.gangs, self._notify)
        self.verbs = Verbs(
            self.ledger,
            settings.resource_domain,
            [cast(FilterPlugin, filters.REGISTRY[n](ctx)) for n in filters.DEFAULT_FILTERS],
            [cast(ScorePlugin, filters.REGISTRY[n](ctx)) for n in filters.DEFAULT_SCORERS],
            binder,
            learn_nodes=not settings.kube,
            gangs=self.gangs,
            gang_wait_seconds=settings.gang_wait_seconds,
        )
        # ESLs created over HTTP (/v1/esl), each on its own LedgerBackend.
        self.esls = Instances(self._esl_backend)
        self._started = threading.Event()
        self._stopping = threading.Event()
        self._failed: str | None = None
        self._thread: threading.Thread | None = None

    def _esl_backend(self) -> LedgerBackend:
        s, wb = self.settings, self.writeback

        def wait(version: int, nodes: list[str]) -> bool:
            return bool(wb.wait_durable(version, nodes, s.writeback_wait_seconds))

        return LedgerBackend(
            self.ledger,
            s.resource_domain,
            wait=wait if wb is not None else None,
            learn=not s.kube,
            scores=s.bind,  # extender mode: its prioritize honours preferences
        )

    def _notify(self, wakes: list[Wake]) -> None:
        if self.annotator is not None:
            self.annotator.send(wakes)

    def _expire_gangs(self) -> None:
        while not self._stopping.wait(self.settings.gang_expiry_interval_seconds):
            wakes = self.gangs.expire()
            if wakes:
                log.info("gang reservations expired", extra={"members": len(wakes)})
                self._notify(wakes)

    def _restore_gangs(self) -> None:
        """Reservations live on the members' pods (annotations); take them back."""
        keys = self.gangs.keys
        for raw in self.annotator.reserved_members():
            try:
                pod = self.verbs.pod_info(raw)
                spec = gang_of(pod, keys)
                until = float(pod.annotations[keys.until])
            except (BadRequest, InvalidGang, KeyError, ValueError) as e:
                log.warning("ignoring a malformed gang reservation", extra={"error": str(e)})
                continue
            if spec is not None:
                self.gangs.restore(pod, spec, pod.annotations[keys.node], until)

    def start(self) -> None:
        """Start in the background; /readyz turns true once the ledger is rebuilt."""
        threading.Thread(target=self._expire_gangs, name="gang-expiry", daemon=True).start()
        threading.Thread(
            target=self.esls.run, args=(self._stopping,), name="esl-steps", daemon=True
        ).start()
        if self.view is None:
            self._started.set()
            return
        self._thread = threading.Thread(target=self._start_kube, name="startup", daemon=True)
        self._thread.start()

    def _start_kube(self) -> None:
        while True:
            try:
                self.view.rebuild()
                break
            except Exception as e:  # the API server may not be up yet: keep trying
                self._failed = f"rebuilding the ledger from the cluster failed: {e}"
                log.warning(self._failed)
                if self._stopping.wait(1.0):
                    return
        self._failed = None
        if self.annotator is not None:
            self._restore_gangs()
            self.annotator.start()
        self.writeback.start()
        self.view.start()
        self._started.set()
        log.info("ready", extra={"nodes": len(self.ledger.node_names())})

    def stop(self) -> None:
        self._stopping.set()
        if self.view is not None:
            self.view.stop()
        if self.writeback is not None:
            self.writeback.stop()
        if self.annotator is not None:
            self.annotator.stop()

    def ready(self) -> tuple[bool, str]:
        if not self._started.is_set():
            return False, self._failed or "rebuilding the ledger from the cluster"
        if self.view is not None and not self.view.synced.is_set():
            return False, "cluster view is re-syncing"
        return True, "ok"

    def update_gauges(self) -> None:
        snap = self.ledger.snapshot()
        m = self.metrics
        m.ledger_nodes.set(len(snap.nodes))
        m.ledger_resources.set(len({r for v in snap.nodes.values() for r in v.ephemeral}))
        m.ledger_version.set(snap.version)
        for kind in HolderKind:
            m.ledger_holdings.labels(kind.value).set(
                sum(1 for h in snap.holdings.values() if h.kind is kind)
            )
