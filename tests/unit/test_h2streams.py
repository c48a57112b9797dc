"""The verbs listener's HTTP/2 stream scheduler (extender.http.h2streams): hypercorn's calls
of priority.PriorityTree answered in turn order, with the same errors."""

from __future__ import annotations

import hypercorn.protocol
import priority
import pytest

from extender.http import h2streams
from extender.http.h2streams import FairH2Protocol, FairStreams


def turns(streams: FairStreams, n: int) -> list[int]:
    return [next(streams) for _ in range(n)]


def opened(*ids: int) -> FairStreams:
    s = FairStreams()
    for i in ids:
        s.insert_stream(i)
    return s


def test_streams_with_data_take_turns() -> None:
    s = opened(1, 3, 5)
    assert turns(s, 7) == [1, 3, 5, 1, 3, 5, 1]


def test_a_blocked_stream_is_skipped_and_an_unblocked_one_waits_its_turn() -> None:
    s = opened(1, 3, 5)
    s.block(3)
    assert turns(s, 3) == [1, 5, 1]
    s.unblock(3)  # at the back, behind 5 and 1
    assert turns(s, 3) == [5, 1, 3]
    s.unblock(5)  # already ready: keeps its place
    assert turns(s, 3) == [5, 1, 3]


def test_none_ready_is_a_deadlock_as_hypercorn_expects() -> None:
    s = opened(1)
    s.block(1)
    with pytest.raises(priority.DeadlockError):
        next(s)
    s.unblock(1)
    assert next(s) == 1
    s.remove_stream(1)
    with pytest.raises(priority.DeadlockError):
        next(s)


@pytest.mark.parametrize("call", ["block", "unblock", "remove_stream"])
def test_an_unknown_stream_is_missing(call: str) -> None:
    s = opened(1)
    s.remove_stream(1)
    with pytest.raises(priority.MissingStreamError):
        getattr(s, call)(1)


def test_a_stream_is_opened_once() -> None:
    s = opened(1)
    with pytest.raises(priority.DuplicateStreamError):
        s.insert_stream(1, depends_on=None, weight=16, exclusive=False)


def test_a_priority_frame_creates_no_state() -> None:
    """Priorities are not honoured, and a PRIORITY frame naming streams that never open
    leaves nothing behind (hypercorn inserts a stream when its HEADERS come)."""
    s = FairStreams()
    for i in range(1, 20_000, 2):
        s.reprioritize(stream_id=i, depends_on=None, weight=200, exclusive=True)
    with pytest.raises(priority.DeadlockError):
        next(s)
    s.insert_stream(7)
    assert turns(s, 2) == [7, 7]


def test_hypercorn_builds_its_http2_connections_with_it() -> None:
    h2streams.install()
    assert hypercorn.protocol.H2Protocol is FairH2Protocol
