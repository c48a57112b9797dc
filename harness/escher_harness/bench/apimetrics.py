"""Counts of API writes, read from kube-apiserver's own /metrics.

The gang benchmark reads them when a replay starts and once it has drained, to report API
writes per gang the same way for every approach, whoever made them: the load generator's
creates, patches and deletes, the scheduler's bindings and status patches, the extender's
bindings and node status patches, the peers' PodGroup updates, and kwok's pod and node
status patches. Events (scheduler diagnostics) and leases are left out: they are not part
of placing a gang. Kept per verb and resource, so the report can say where writes went.
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
_IGNORED = {"events", "leases"}


def write_counts(api: client.ApiClient) -> dict[str, int]:
    """Write requests the API server has served since it started, keyed `VERB resource` or
    `VERB resource/subresource` (e.g. `POST pods/binding`)."""
    method, url, headers, body, post = api.param_serialize(
        "GET", "/metrics", auth_settings=["BearerToken"]
    )
    raw: Any = api.call_api(method, url, header_params=headers, body=body, post_params=post)
    raw.read()
    return parse_write_counts(raw.data.decode())


def parse_write_counts(text: str) -> dict[str, int]:
    out: dict[str, float] = {}
    for m in _REQUESTS.finditer(text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))
        resource = labels.get("resource", "")
        if labels.get("verb") not in _WRITE_VERBS or resource in _IGNORED:
            continue
        sub = labels.get("subresource")
        key = f"{labels['verb']} {resource}{'/' + sub if sub else ''}"
        out[key] = out.get(key, 0.0) + float(m["value"])
    return {k: int(v) for k, v in sorted(out.items())}


def difference(after: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    """Writes between two readings, per key (keys with none left out)."""
    keys = sorted(set(after) | set(before))
    return {k: d for k in keys if (d := after.get(k, 0) - before.get(k, 0))}
