"""List, then watch from the list's resourceVersion, until a condition holds: how the harness
waits for the API to show something (kwok taking the nodes over, pods reaching a phase)
without a polling interval that blurs when it happened.

Used by escher_harness.localcluster.kwok and escher_harness.workload.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

# The longest watch request: `between` runs at least this often.
_REQUEST_SECONDS = 5


def list_then_watch(
    list_call: Callable[..., Any],
    *args: Any,
    seen: Callable[[Any, bool], None],
    done: Callable[[], bool],
    deadline: float,
    between: Callable[[], None] | None = None,
    request_seconds: int = _REQUEST_SECONDS,
) -> bool:
    """Hand `seen(obj, deleted)` every object `list_call(*args)` lists, then every object its
    watch reports, until `done()` or `deadline` (time.monotonic()); return done().

    `list_call` is a typed client list method (e.g. CoreV1Api.list_node): objects arrive
    deserialised. Watch requests last at most `request_seconds`, and `between` (which may
    raise, e.g. when a process it depends on has exited) runs before each. A watch that
    expires (410 Gone) lists again; other API errors propagate.
    """
    version: str | None = None
    stream: Any = watch.Watch()  # type: ignore[no-untyped-call]
    while not done() and time.monotonic() < deadline:
        if between is not None:
            between()
        if version is None:
            listed = list_call(*args)
            for item in listed.items:
                seen(item, False)
            version = listed.metadata.resource_version
            continue
        left = math.ceil(deadline - time.monotonic())
        try:
            for event in stream.stream(
                list_call,
                *args,
                resource_version=version,
                timeout_seconds=max(1, min(request_seconds, left)),
            ):
                obj = event["object"]
                version = obj.metadata.resource_version
                seen(obj, event["type"] == "DELETED")
                if done():
                    stream.stop()
        except ApiException as e:
            if e.status != HTTPStatus.GONE:
                raise
            version = None  # the watch expired: list again
    return done()
