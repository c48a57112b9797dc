"""Prometheus metrics of the extender service, served at /metrics.

One Metrics object per service instance, on its own registry (so tests can run several apps
in one process). Created by extender.app and handed to the routes, the write-back and the
cluster view, which record into it.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Sub-millisecond buckets: the filter path is expected to answer in well under 2 ms.
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
)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.request_seconds = Histogram(
            "escher_extender_request_seconds",
            "Server-side latency of extender and policy calls, by verb.",
            ["verb"],
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.decisions = Counter(
            "escher_extender_decisions_total",
            "Decisions by verb and outcome (filter: passed/rejected nodes; bind: bound/refused"
            "/failed; prioritize: scored nodes).",
            ["verb", "outcome"],
            registry=r,
        )
        self.bad_requests = Counter(
            "escher_extender_bad_requests_total",
            "Requests refused with a 4xx, by path.",
            ["path"],
            registry=r,
        )
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
        self.rebuild_failures = Counter(
            "escher_ledger_rebuild_failures_total",
            "Failed attempts to rebuild the ledger from the cluster (at start-up, retried every"
            " second; not ready meanwhile), by reason.",
            ["reason"],
            registry=r,
        )
        self.watch_restarts = Counter(
            "escher_watch_restarts_total",
            "Watches of the cluster view restarted, by resource and reason.",
            ["resource", "reason"],
            registry=r,
        )
