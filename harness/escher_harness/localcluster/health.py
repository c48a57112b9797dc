"""Readiness of the control plane's components, by polling their health endpoints.

Called by cluster.up (wait_ready, after starting each component, in start order; start_failure
while it waits for kwok, which has no endpoint) and by cluster.status (probe). No fixed sleeps:
a component is ready when its endpoint answers 200, and a component that exits while we wait
fails the start at once, with the tail of its log.
"""

from __future__ import annotations

import time

import httpx

from escher_harness.localcluster.errors import ClusterError
from escher_harness.localcluster.processes import ProcessRecord, exit_code, is_running, log_tail


def probe(client: httpx.Client, record: ProcessRecord) -> str | None:
    """None when the component's health endpoint answers 200, else why not (one line). A
    component without one (health_url "", kwok) counts as healthy while it runs."""
    if not record.health_url:
        return None
    headers = {"Authorization": f"Bearer {record.health_token}"} if record.health_token else {}
    try:
        response = client.get(record.health_url, headers=headers)
    except httpx.HTTPError as e:
        return f"{type(e).__name__}: {e}"
    if response.status_code == 200:
        return None
    return f"HTTP {response.status_code}: {' '.join(response.text.split())[:200]}"


def http_client(timeout: float = 2.0) -> httpx.Client:
    # The apiserver and kube-scheduler serve self-signed certificates on loopback.
    return httpx.Client(verify=False, timeout=timeout)


def wait_ready(record: ProcessRecord, *, deadline: float, timeout: float) -> None:
    """Poll until `record` is healthy; ClusterError when it exits or `deadline` passes.

    `deadline` is a time.monotonic() value shared by the whole start-up; `timeout` is that
    overall budget in seconds, for the message.
    """
    pause = 0.02
    with http_client(timeout=1.0) as client:
        while True:
            if (failure := start_failure(record)) is not None:
                raise ClusterError(failure)
            reason = probe(client, record)
            if reason is None:
                return
            if time.monotonic() >= deadline:
                raise ClusterError(
                    f"{record.name} was not ready at {record.health_url} within the start-up "
                    f"timeout of {timeout:g}s (last answer: {reason}); "
                    f"last lines of {record.log}:\n{log_tail(record.log)}"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.05)  # a cluster start waits on five of these in a row


def start_failure(record: ProcessRecord) -> str | None:
    """None while `record` runs, else a message with its exit code and the tail of its log."""
    if is_running(record):
        return None
    code = exit_code(record)
    status = f" with exit code {code}" if code is not None else ""
    return (
        f"{record.name} exited during start-up{status}; "
        f"last lines of {record.log}:\n{log_tail(record.log)}"
    )
