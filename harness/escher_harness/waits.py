"""Waiting for a condition rather than for a while, and kube-scheduler's own counters.

An e2e test that sleeps to let something happen passes on a slow machine without it having
happened; one that sleeps to let something NOT happen passes without proving anything. So
tests wait with `until` for what they need, and a check that something did not happen first
waits for a positive control: a pod that should be tried or bound in the same window is, or
kube-scheduler's counters show it made its attempts (`scheduler_metrics`).

Used by tests/e2e.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import httpx
from prometheus_client.parser import text_string_to_metric_families

from escher_harness.localcluster.cluster import ClusterInfo

T = TypeVar("T")


def until(check: Callable[[], T], what: str, timeout: float = 30.0, every: float = 0.1) -> T:
    """`check()`'s first true value, polled every `every` seconds; AssertionError naming
    `what` (and the last value) after `timeout`."""
    deadline = time.monotonic() + timeout
    while not (out := check()):
        assert time.monotonic() < deadline, f"timed out after {timeout:g}s: {what} ({out!r})"
        time.sleep(every)
    return out


def scheduler_metrics(info: ClusterInfo, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """kube-scheduler's samples of metric `name` (e.g. "scheduler_pending_pods"), by label set
    (it listens on loopback, with /metrics open)."""
    text = httpx.get(
        f"https://127.0.0.1:{info.ports['scheduler']}/metrics", verify=False, timeout=10
    ).text
    return {
        frozenset(s.labels.items()): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def scheduling_attempts(info: ClusterInfo, result: str) -> float:
    """kube-scheduler's scheduling attempts so far with `result` ("scheduled",
    "unschedulable", "error"), every profile."""
    samples = scheduler_metrics(info, "scheduler_schedule_attempts_total")
    return sum(v for labels, v in samples.items() if ("result", result) in labels)


def pending_pods(info: ClusterInfo) -> dict[str, float]:
    """kube-scheduler's pending pods by queue ("active", "backoff", "unschedulable",
    "gated")."""
    samples = scheduler_metrics(info, "scheduler_pending_pods")
    out: dict[str, float] = {}
    for labels, v in samples.items():
        queue = dict(labels).get("queue", "")
        out[queue] = out.get(queue, 0.0) + v
    return out
