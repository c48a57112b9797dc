"""escher_harness.listwatch.list_then_watch_raw against a scripted list call: what it hands
over, when it stops, how it treats the watch's ERROR and BOOKMARK events, and how a deadline
that moves cuts a watch request short. The real API server's side: tests/e2e (every
Workload.wait)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from escher_harness.listwatch import list_then_watch_raw


def pod(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv}}


class _Stream:
    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events
        self.closed = False

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        for e in self.events:
            yield (json.dumps(e) + "\n").encode()

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        pass


class Script:
    """A list call: lists answer `lists` in turn, watch requests `watches` in turn."""

    def __init__(self, lists: list[list[dict[str, Any]]], watches: list[list[dict[str, Any]]]):
        self.lists, self.watches = lists, watches
        self.calls: list[dict[str, Any]] = []
        self.streams: list[_Stream] = []

    def __call__(self, *args: Any, **kw: Any) -> Any:
        self.calls.append(kw)
        if kw.get("watch"):
            s = _Stream(self.watches.pop(0) if self.watches else [])
            self.streams.append(s)
            return s
        items = self.lists.pop(0)
        body = {"items": items, "metadata": {"resourceVersion": str(len(self.calls))}}
        return type("Raw", (), {"data": json.dumps(body).encode()})()


def run(script: Script, want: set[str], seconds: float = 3.0) -> tuple[bool, list[str]]:
    got: set[str] = set()
    order: list[str] = []

    def seen(obj: dict[str, Any], deleted: bool) -> None:
        name = obj["metadata"]["name"]
        order.append(("-" if deleted else "+") + name)
        (got.discard if deleted else got.add)(name)

    deadline = time.monotonic() + seconds
    done = list_then_watch_raw(
        script, "ns", seen=seen, done=lambda: want <= got, until=lambda: deadline
    )
    return done, order


ADDED, DELETED, BOOKMARK, ERROR = "ADDED", "DELETED", "BOOKMARK", "ERROR"


@pytest.mark.parametrize(
    ("lists", "watches", "done", "order", "list_calls"),
    [
        # Met by the list: no watch request at all.
        ([[pod("a", "1")]], [], True, ["+a"], 1),
        # Met by a watch event; a bookmark moves the version and is handed to no one.
        (
            [[]],
            [
                [
                    {"type": BOOKMARK, "object": pod("", "5")},
                    {"type": ADDED, "object": pod("a", "6")},
                ]
            ],
            True,
            ["+a"],
            1,
        ),
        # A deletion is handed over as one.
        (
            [[pod("b", "1")]],
            [
                [
                    {"type": DELETED, "object": pod("b", "2")},
                    {"type": ADDED, "object": pod("a", "3")},
                ]
            ],
            True,
            ["+b", "-b", "+a"],
            1,
        ),
        # An expired watch (410) lists again.
        (
            [[], [pod("a", "9")]],
            [[{"type": ERROR, "object": {"code": 410, "message": "too old"}}]],
            True,
            ["+a"],
            2,
        ),
    ],
)
def test_what_is_handed_over_and_when_it_stops(
    lists: list[list[dict[str, Any]]],
    watches: list[list[dict[str, Any]]],
    done: bool,
    order: list[str],
    list_calls: int,
) -> None:
    script = Script(lists, watches)
    assert run(script, {"a"}) == (done, order)
    assert sum(1 for c in script.calls if not c.get("watch")) == list_calls
    assert all(s.closed for s in script.streams)


def test_a_watch_error_other_than_expiry_is_raised() -> None:
    script = Script([[]], [[{"type": ERROR, "object": {"code": 500, "message": "boom"}}]])
    with pytest.raises(ApiException):
        run(script, {"a"})


def test_a_passed_deadline_still_lists_once_and_says_what_it_saw() -> None:
    script = Script([[pod("b", "1")]], [])
    assert run(script, {"a"}, seconds=0) == (False, ["+b"])
    assert len(script.calls) == 1


def test_a_deadline_moved_earlier_cuts_the_watch_request_short() -> None:
    """The first request is asked for up to 5 s; once an event brings the deadline within a
    second, the stream is left and the next request is asked for only what is left."""
    deadline = [time.monotonic() + 30]
    script = Script(
        [[]], [[{"type": ADDED, "object": pod("b", "2")}, {"type": ADDED, "object": pod("c", "3")}]]
    )

    names: list[str] = []

    def seen(obj: dict[str, Any], deleted: bool) -> None:
        names.append(obj["metadata"]["name"])
        deadline[0] = time.monotonic() + 0.3  # a settle time begins

    assert not list_then_watch_raw(
        script, "ns", seen=seen, done=lambda: False, until=lambda: deadline[0]
    )
    watches = [c for c in script.calls if c.get("watch")]
    assert watches[0]["timeout_seconds"] == 5
    assert names == ["b"]  # the first request was left at once, "c" never read
    assert script.streams[0].closed
    assert len(watches) >= 2 and watches[1]["timeout_seconds"] == 1
