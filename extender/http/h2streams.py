"""Which HTTP/2 stream the verbs' listener sends next: round robin, in constant time.

hypercorn's HTTP/2 connection asks a scheduler, each time it may send, for a stream with
data to send. Its own (the `priority` package's PriorityTree) keeps every open stream in a
heap and, to find one that has data, pops each that has none: a gang's members held at the
bind barrier are hundreds of open streams with nothing to say, so every reply of the burst
that follows walked all of them. At 900 held streams that was 1.2 ms of the event loop per
reply and over a second per burst, in steps of up to 137 ms (5,000 nodes, a gang of 1,024).

FairStreams answers the same calls with the streams that have data in a dict, in the order
they got it: next() is the first of them, moved to the back, so each gets its turn. It does
not honour the client's stream priorities, which RFC 9113 deprecated; kube-scheduler's Go
client sends none. A PRIORITY frame creates no state, so the streams it knows are the
connection's open ones, which SETTINGS_MAX_CONCURRENT_STREAMS bounds.

`install()` makes hypercorn's connections use it; called by extender.http.verbs_listener,
the only user of hypercorn.
"""

from __future__ import annotations

from typing import Any

import hypercorn.protocol
from hypercorn.protocol.h2 import H2Protocol
from priority.priority import DeadlockError, DuplicateStreamError, MissingStreamError


class FairStreams:
    """The calls hypercorn's H2Protocol makes of priority.PriorityTree, with its errors."""

    def __init__(self) -> None:
        self._open: set[int] = set()
        self._ready: dict[int, None] = {}  # streams with data to send, in turn order

    def insert_stream(self, stream_id: int, *_: Any, **__: Any) -> None:
        """A new stream, ready until blocked (as PriorityTree inserts it)."""
        if stream_id in self._open:
            raise DuplicateStreamError(stream_id)
        self._open.add(stream_id)
        self._ready[stream_id] = None

    def reprioritize(self, stream_id: int, *_: Any, **__: Any) -> None:
        """Priorities are not honoured (RFC 9113 deprecated them): nothing to change."""

    def block(self, stream_id: int) -> None:
        self._known(stream_id)
        self._ready.pop(stream_id, None)

    def unblock(self, stream_id: int) -> None:
        self._known(stream_id)
        self._ready.setdefault(stream_id, None)

    def remove_stream(self, stream_id: int) -> None:
        self._known(stream_id)
        self._open.discard(stream_id)
        self._ready.pop(stream_id, None)

    def __iter__(self) -> FairStreams:
        return self

    def __next__(self) -> int:
        """The stream whose turn it is; DeadlockError when none has data to send."""
        if not self._ready:
            raise DeadlockError("no stream has data to send")
        stream_id = next(iter(self._ready))
        del self._ready[stream_id]
        self._ready[stream_id] = None
        return stream_id

    def _known(self, stream_id: int) -> None:
        if stream_id not in self._open:
            raise MissingStreamError(f"stream {stream_id} is not open")


class FairH2Protocol(H2Protocol):
    """hypercorn's HTTP/2 connection, sending by FairStreams."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.priority = FairStreams()  # type: ignore[assignment]


def install() -> None:
    """Make every hypercorn HTTP/2 connection of this process send by FairStreams. hypercorn
    creates its connections by the module's name H2Protocol (hypercorn.protocol's
    ProtocolWrapper), and offers no other way to choose the scheduler."""
    hypercorn.protocol.H2Protocol = FairH2Protocol  # type: ignore[attr-defined]
