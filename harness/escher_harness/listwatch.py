"""List, then watch from the list's resourceVersion, until a condition holds: how the harness
waits for the API to show something (kwok taking the nodes over, pods reaching a phase, pods
bound) without a polling interval that blurs when it happened, and without the CPU a poll
costs (a list of every pod ten times a second kept kube-apiserver and the test's process
busy for as long as a test waited).

Used by escher_harness.localcluster.kwok and escher_harness.workload.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

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


def list_then_watch_raw(
    list_call: Callable[..., Any],
    *args: Any,
    seen: Callable[[dict[str, Any], bool], None],
    done: Callable[[], bool],
    until: Callable[[], float],
    request_seconds: int = _REQUEST_SECONDS,
) -> bool:
    """As list_then_watch, with objects handed over as the API server's JSON (no typed
    model is built: a list of a thousand pods decodes in milliseconds), and a deadline that
    may move: `until()` (time.monotonic()) is read again after every object, and a watch
    request that would outlast it is cut short and made again, so a caller that waits a
    while after something happened (a settle time) is not held up to request_seconds."""
    version: str | None = None
    while True:
        if version is None:  # first, and after an expired watch: a deadline passed lists once
            raw = list_call(*args, _preload_content=False)
            listed = json.loads(raw.data)
            for item in listed["items"]:
                seen(item, False)
            version = listed["metadata"]["resourceVersion"]
        if done() or time.monotonic() >= until():
            return done()
        seconds = max(1, min(request_seconds, math.ceil(until() - time.monotonic())))
        end = time.monotonic() + seconds
        resp = list_call(
            *args,
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=seconds,
            _preload_content=False,
        )
        try:
            for line in iter_resp_lines(resp):  # type: ignore[no-untyped-call]
                event = json.loads(line)
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    if obj.get("code") != HTTPStatus.GONE:
                        raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                    version = None  # the watch expired: list again
                    break
                version = obj["metadata"]["resourceVersion"]
                if kind != "BOOKMARK":
                    seen(obj, kind == "DELETED")
                if done() or until() < end - 1:
                    break
        finally:
            resp.close()
            resp.release_conn()
