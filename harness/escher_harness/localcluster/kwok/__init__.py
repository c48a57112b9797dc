"""kwok as the fake nodes' kubelets: the stages it plays, the annotations they read, and the
wait for it to take the nodes over.

Used by cluster.up (STAGES, wait_for_nodes; the command line is config.kwok_command) and by
the workload driver (RUN_TIME_ANNOTATION, format_run_time). stages.yaml, beside this file,
says what each stage does and why it differs from kwok's own sets. In short: a bound pod
goes Running at once; one annotated RUN_TIME_ANNOTATION goes Succeeded that long after it
went Running; the others run until deleted; a deleted pod is gone at once. kwok only manages
nodes annotated fakenodes.FAKE_NODE_ANNOTATION, marks each one `status.phase: Running` when it
takes it over, then renews its conditions' heartbeat every 20-45 s (HEARTBEAT_ANNOTATION sets
an exact interval per node). It never writes capacity or allocatable.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

from kubernetes import client

from escher_harness.listwatch import list_then_watch
from escher_harness.localcluster.errors import ClusterError

STAGES: Final = Path(__file__).with_name("stages.yaml")
# A Go duration (time.ParseDuration: "30s", "1.5s", "2m"), read by the pod stages.
RUN_TIME_ANNOTATION: Final = "harness.escher.io/run-time"
# A Go duration, read by the node-heartbeat stage.
HEARTBEAT_ANNOTATION: Final = "harness.escher.io/heartbeat-interval"
# What the node-initialize stage sets once kwok has a node.
TAKEN_OVER_PHASE: Final = "Running"
# Go's time.Duration is an int64 of nanoseconds.
_MAX_SECONDS: Final = (2**63 - 1) / 1e9


def format_run_time(seconds: float) -> str:
    """`seconds` as a Go duration string with microsecond resolution ("30s", "1.5s", "0s").

    ValueError for a negative, infinite or NaN value, or one beyond Go's time.Duration.
    """
    if not (math.isfinite(seconds) and 0 <= seconds <= _MAX_SECONDS):
        raise ValueError(f"run time must be a finite number of seconds >= 0, not {seconds!r}")
    # Fixed notation (Go rejects "1e-05s"), trailing zeros dropped.
    return f"{seconds:.6f}".rstrip("0").rstrip(".") + "s"


def wait_for_nodes(
    api: client.ApiClient,
    names: Iterable[str],
    *,
    deadline: float,
    alive: Callable[[], str | None],
) -> None:
    """Return once kwok has taken over every node in `names` (node-initialize set its phase).

    Watches the nodes in one-second requests, so that `alive` (None while kwok runs, else why
    it stopped) is checked every second. ClusterError when kwok stops or `deadline`
    (time.monotonic()) passes first; API errors (kubernetes.client.ApiException, urllib3
    errors) propagate.
    """
    waiting = set(names)

    def seen(node: client.V1Node, deleted: bool) -> None:
        if not deleted and node.status is not None and node.status.phase == TAKEN_OVER_PHASE:
            waiting.discard(node.metadata.name if node.metadata else "")

    def check_alive() -> None:
        if (reason := alive()) is not None:
            raise ClusterError(reason)

    taken_over = list_then_watch(
        client.CoreV1Api(api).list_node,
        seen=seen,
        done=lambda: not waiting,
        deadline=deadline,
        between=check_alive,
        request_seconds=1,
    )
    check_alive()  # also when there was nothing to wait for (no nodes)
    if not taken_over:
        raise ClusterError(
            f"kwok did not take over {len(waiting)} of the fake nodes in time "
            f"(e.g. {min(waiting)}, still without status.phase {TAKEN_OVER_PHASE})"
        )
