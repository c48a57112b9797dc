"""Counts of API writes, read from kube-apiserver's own /metrics.

The gang benchmark reads it before and after each run to report API writes per gang,
the same way for every approach (whoever made the writes: the scheduler's bindings, the
extender's node status patches and pod annotations, the load generator's creates and
deletes). Events (scheduler diagnostics) and leases are left out: they are not part of
placing a gang.
"""

from __future__ import annotations

import re
from typing import Any

from kubernetes import client

_WRITE = re.compile(
    r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$", re.MULTILINE
)
_WRITE_VERBS = {"POST", "PUT", "PATCH", "DELETE", "APPLY"}
_IGNORED = {"events", "leases"}


def write_requests(api: client.ApiClient) -> int:
    """Write requests the API server has served since it started."""
    method, url, headers, body, post = api.param_serialize(
        "GET", "/metrics", auth_settings=["BearerToken"]
    )
    raw: Any = api.call_api(method, url, header_params=headers, body=body, post_params=post)
    raw.read()
    text = raw.data.decode()
    total = 0.0
    for m in _WRITE.finditer(text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))
        if labels.get("verb") in _WRITE_VERBS and labels.get("resource") not in _IGNORED:
            total += float(m["value"])
    return int(total)
