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
from extender.filters.base import FilterPlugin, ScorePlugin
from extender.ledger import HolderKind, Ledger
from extender.metrics import Metrics
from extender.settings import Settings
from extender.verbs import Verbs

log = logging.getLogger(__name__)


class Service:
    def __init__(self, settings: Settings, api_client: Any = None) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.ledger = Ledger(settings.resource_domain)
        self.view: Any = None
        self.writeback: Any = None
        binder = None
        if settings.kube:
            # Imported here: the standalone mode needs no Kubernetes client at all.
            from extender.kube.binder import Binder
            from extender.kube.client import api_client as make_api_client
            from extender.kube.view import ClusterView
            from extender.kube.writeback import WriteBack

            api = api_client or make_api_client(
                settings.kubeconfig, in_cluster=settings.in_cluster, pool_size=32
            )
            self.writeback = WriteBack(api, self.ledger, settings, self.metrics)
            self.view = ClusterView(
                api, self.ledger, settings, self.metrics, on_node_drift=self.writeback.mark_dirty
            )
            if settings.bind:
                binder = Binder(api)
        self.verbs = Verbs(
            self.ledger,
            settings.resource_domain,
            [cast(FilterPlugin, filters.REGISTRY[n]()) for n in filters.DEFAULT_FILTERS],
            [cast(ScorePlugin, filters.REGISTRY[n]()) for n in filters.DEFAULT_SCORERS],
            binder,
            learn_nodes=not settings.kube,
        )
        self._started = threading.Event()
        self._stopping = threading.Event()
        self._failed: str | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start in the background; /readyz turns true once the ledger is rebuilt."""
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
