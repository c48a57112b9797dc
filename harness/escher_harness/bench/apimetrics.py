"""Counts of API writes, read from kube-apiserver's own /metrics.

The gang benchmark reads them when a replay starts and once it has drained, to report API
writes per gang the same way for every approach, whoever made them: the load generator's
creates, patches and deletes, the scheduler's bindings and status patches, the extender's
bindings and node status patches, the peers' PodGroup updates, and kwok's pod and node
status patches. Events (scheduler diagnostics) and leases are left out: they are not part
of placing a gang. Kept per verb and resource, so the report can say where writes went.

The throughput benchmark (escher_harness.bench.throughput) reads them around each measured
window to report API writes per scheduled pod (`per_pod`): there events count (kube-scheduler
writes one per pod it places, in every mode) and only leases (time, not pods) are left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kubernetes import client

_REQUESTS = re.compile(
    r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$", re.MULTILINE
)
_WRITE_VERBS = {"POST", "PUT", "PATCH", "DELETE", "APPLY"}
_IGNORED = frozenset({"events", "leases"})
# What the throughput benchmark leaves out: lease renewals follow time, not pods.
LEASES_ONLY = frozenset({"leases"})


def scrape(api: client.ApiClient) -> str:
    """kube-apiserver's /metrics, as text."""
    method, url, headers, body, post = api.param_serialize(
        "GET", "/metrics", auth_settings=["BearerToken"]
    )
    raw: Any = api.call_api(method, url, header_params=headers, body=body, post_params=post)
    raw.read()
    return str(raw.data.decode())


def write_counts(api: client.ApiClient, ignored: frozenset[str] = _IGNORED) -> dict[str, int]:
    """Write requests the API server has served since it started, keyed `VERB resource` or
    `VERB resource/subresource` (e.g. `POST pods/binding`)."""
    return parse_write_counts(scrape(api), ignored)


def parse_write_counts(text: str, ignored: frozenset[str] = _IGNORED) -> dict[str, int]:
    out: dict[str, float] = {}
    for m in _REQUESTS.finditer(text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))
        resource = labels.get("resource", "")
        if labels.get("verb") not in _WRITE_VERBS or resource in ignored:
            continue
        sub = labels.get("subresource")
        key = f"{labels['verb']} {resource}{'/' + sub if sub else ''}"
        out[key] = out.get(key, 0.0) + float(m["value"])
    return {k: int(v) for k, v in sorted(out.items())}


def difference(after: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    """Writes between two readings, per key (keys with none left out)."""
    keys = sorted(set(after) | set(before))
    return {k: d for k in keys if (d := after.get(k, 0) - before.get(k, 0))}


def per_pod(writes: Mapping[str, int], pods: int) -> dict[str, Any]:
    """Writes of a window (a `difference`) per scheduled pod: the total, per request (`VERB
    resource[/subresource]`) and per resource (its verbs added up), rounded for reports."""
    if pods <= 0:
        raise ValueError("writes per pod need at least one pod")
    resources: dict[str, int] = {}
    for key, n in writes.items():
        resource = key.partition(" ")[2]
        resources[resource] = resources.get(resource, 0) + n
    return {
        "total": sum(writes.values()),
        "per_pod": round(sum(writes.values()) / pods, 3),
        "by_request": {k: round(n / pods, 3) for k, n in sorted(writes.items())},
        "by_resource": {k: round(n / pods, 3) for k, n in sorted(resources.items())},
    }
