"""Prometheus metrics of the extender service, served at /metrics.

One Metrics object per service, on its own registry (so tests can run several services in
one process). Every label takes values from a fixed set (verbs, route templates, reasons):
no caller can add a series. Gauges are read at scrape time from totals the parts maintain,
so a scrape costs the same at 5,000 nodes as at 5. Created by extender.service and handed to
the routes and adapters, which record into it.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Sub-millisecond buckets: the filter path is expected to answer in well under a millisecond.
_LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1.0,
    5.0,
    15.0,
)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._verbs(self.registry)
        self._ledger(self.registry)
        self._writeback(self.registry)
        self._gangs(self.registry)
        self._runtime(self.registry)
        self._cluster(self.registry)
        self._scrape_hooks: list[Callable[[], None]] = []

    def _verbs(self, r: CollectorRegistry) -> None:
        """The scheduling verbs and the HTTP routes: latency, decisions, refusals, requeues."""
        self.request_seconds = Histogram(
            "escher_extender_request_seconds",
            "Server-side latency of extender verbs and policy calls, by verb.",
            ["verb"],
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.decisions = Counter(
            "escher_extender_decisions_total",
            "Decisions by verb and outcome (filter: passed/rejected nodes; bind: bound/refused;"
            " prioritize: scored nodes; preempt: nodes kept/dropped).",
            ["verb", "outcome"],
            registry=r,
        )
        self.client_errors = Counter(
            "escher_extender_client_errors_total",
            "Requests refused with a 4xx, by route template (unknown paths: 'unmatched') and "
            "status.",
            ["route", "status"],
            registry=r,
        )
        self.filter_nodes = Histogram(
            "escher_extender_filter_nodes",
            "Nodes named in a filter call (kube-scheduler sends every feasible node, or only a "
            "pod's nominated node when that one passes its own filters).",
            buckets=(1, 2, 8, 64, 512, 1024, 5000, 15000),
            registry=r,
        )
        self.filtered_pods = Gauge(
            "escher_filtered_pods", "Pods seen at filter and not yet bound.", registry=r
        )
        self.bind_seconds = Histogram(
            "escher_bind_api_seconds",
            "Time the API server took to create a Binding (the extender's bind).",
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.requeue_wakes = Counter(
            "escher_requeue_wakes_total",
            "Pods turned away for an ephemeral resource and touched when it freed, so "
            "kube-scheduler retries them (extender.scheduling.requeue), by outcome (sent, "
            "failed, dropped).",
            ["outcome"],
            registry=r,
        )

    def _ledger(self, r: CollectorRegistry) -> None:
        """The ledger and the ESLs, read at scrape time from their totals."""
        self.ledger_nodes = Gauge("escher_ledger_nodes", "Nodes in the ledger.", registry=r)
        self.ledger_resources = Gauge(
            "escher_ledger_resources", "Distinct ephemeral resources.", registry=r
        )
        self.ledger_holdings = Gauge(
            "escher_ledger_holdings",
            "Holdings (bound, assumed, reserved) by kind.",
            ["kind"],
            registry=r,
        )
        self.ledger_version = Gauge("escher_ledger_version", "Ledger change counter.", registry=r)
        self.esl_instances = Gauge(
            "escher_esl_instances", "ESL instances created over HTTP.", registry=r
        )

    def _writeback(self, r: CollectorRegistry) -> None:
        """The write-back of the ledger to the cluster (Node status or ResourceSlices)."""
        self.writeback_lag_seconds = Histogram(
            "escher_writeback_lag_seconds",
            "Time from a ledger change to its node status patch succeeding.",
            registry=r,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        self.writeback_failures = Counter(
            "escher_writeback_failures_total",
            "Node status patches that failed (and will be retried), by reason.",
            ["reason"],
            registry=r,
        )
        self.writeback_pending = Gauge(
            "escher_writeback_pending_nodes",
            "Nodes whose status is behind the ledger.",
            registry=r,
        )

    def _gangs(self, r: CollectorRegistry) -> None:
        """The gang feature: gangs by phase, the gate, lifts and nominations."""
        self.gangs = Gauge("escher_gangs", "Gangs known, by phase.", ["phase"], registry=r)
        self.gang_lifts = Counter(
            "escher_gang_lifts_total",
            "Gang members let through the gang gate, and held members told why "
            "(extender.gang.kube.lifter), by outcome (sent, told: a held member's condition "
            "written, failed, deferred: too many in flight, named again later).",
            ["outcome"],
            registry=r,
        )
        self.gang_nominations = Counter(
            "escher_gang_nominations_total",
            "Reserved nodes written to gang members' status.nominatedNodeName "
            "(extender.gang.kube.nominator), by outcome (sent, cleared, failed, deferred: too "
            "many in flight, unneeded: a delayed one whose member's cycle came first).",
            ["outcome"],
            registry=r,
        )
        self.preference_nominations = Counter(
            "escher_preference_nominations_total",
            "Preferred nodes written to the status.nominatedNodeName of pods stating a "
            "preference (extender.preference.nominations), by outcome (sent, failed, "
            "deferred: too many in flight, unneeded: the pod was bound or gone first).",
            ["outcome"],
            registry=r,
        )
        self.gang_gate_hold = Gauge(
            "escher_gang_gate_hold",
            "What the adaptive gang gate's switch last said: 1, new gang members are held at "
            "the gang gate; 0, they are not (extender.gang.kube.gateswitch).",
            registry=r,
        )

    def _runtime(self, r: CollectorRegistry) -> None:
        """The process: the event loop's lag and the garbage collector's pauses."""
        self.loop_lag = Histogram(
            "escher_event_loop_lag_seconds",
            "How late a timer on the service's event loop fired: how long something held the "
            "loop (every verb, watch and probe waits behind it), or the process was not run.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=r,
        )
        self.loop_lag_max = Gauge(
            "escher_event_loop_lag_max_seconds",
            "The longest lag of the event loop since the service started.",
            registry=r,
        )
        self.loop_held_max = Gauge(
            "escher_event_loop_held_max_seconds",
            "The longest lag of the event loop since the service started that its own work "
            "can account for: each lag bounded by the CPU the loop's thread used meanwhile (an "
            "upper bound; the rest of a lag is the thread not being run, or waiting for the GIL "
            "while a worker thread computes).",
            registry=r,
        )
        self.gc_pause = Histogram(
            "escher_gc_pause_seconds",
            "How long a collection of CPython's garbage collector took (generations 1 and 2; "
            "the far more frequent, short generation-0 ones are not timed), by generation: "
            "the thread that triggered it, the event loop's most often, stands still meanwhile "
            "(extender.collector).",
            ["generation"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5),
            registry=r,
        )
        self.gc_pause_max = Gauge(
            "escher_gc_pause_max_seconds",
            "The longest collection (generation 1 or 2) since the service started.",
            registry=r,
        )
        self.gc_deferring = Gauge(
            "escher_gc_deferring",
            "1 while the garbage collector's full collections are deferred because gang "
            "members' bind calls are in flight (extender.collector.defer_full), else 0.",
            registry=r,
        )

    def _cluster(self, r: CollectorRegistry) -> None:
        """The service in its cluster: start-up, connections, watches, reconciles, leadership."""
        self.startup_failures = Counter(
            "escher_startup_failures_total",
            "Failed attempts of a start-up step (retried with backoff; not ready meanwhile), "
            "by step and reason.",
            ["step", "reason"],
            registry=r,
        )
        self.pending_closed = Counter(
            "escher_pending_connections_closed_total",
            "Connections closed before they sent a request (extender.http.pending), by "
            "listener (api, verbs) and why (timeout: handshake or headers too slow; evicted: "
            "the oldest of too many).",
            ["listener", "why"],
            registry=r,
        )
        self.watch_restarts = Counter(
            "escher_watch_restarts_total",
            "Watches of the cluster view restarted, by resource and reason.",
            ["resource", "reason"],
            registry=r,
        )
        self.policy_reconciles = Counter(
            "escher_policy_reconciles_total",
            "Reconciles of policy objects by the leader, by kind (ephemeralresources, esls) "
            "and outcome (ok, error: retried at the next resync; the object's status says why).",
            ["kind", "outcome"],
            registry=r,
        )
        self.is_leader = Gauge(
            "escher_leader", "1 while this replica holds the lease (or runs alone).", registry=r
        )
        self.leader_changes = Counter(
            "escher_leader_transitions_total",
            "Times this replica became or stopped being the leader.",
            ["to"],
            registry=r,
        )

    def on_scrape(self, hook: Callable[[], None]) -> None:
        """Run `hook` (which sets gauges from maintained totals) before each scrape."""
        self._scrape_hooks.append(hook)

    def scrape(self) -> None:
        for hook in self._scrape_hooks:
            hook()
