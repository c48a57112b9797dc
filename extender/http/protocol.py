"""uvicorn's HTTP protocol, bounding the connections that wait for a request.

uvicorn bounds idle kept-alive connections, but not one that trickles: not its TLS handshake
(asyncio's default allows 60 s, and uvicorn sets none), not its request line and headers,
and not the bytes between two requests (each byte cancels uvicorn's keep-alive timer). Each
would stay open for as long as its client liked. This protocol makes every connection wait
in its listener's Pending set from its accept (from its handshake's end, over TLS) until its
first request's headers are complete, and again from the first byte of each later request
until its headers are: past the set's timeout it answers 408 and closes, and past its size
the oldest waiting connection is closed. A request answered before its body has come in closes its
connection once answered: nothing would read the rest, and a trickle of it would hold the
connection for as long as its client liked.

Over TLS the handshake waits in the same set first (extender.http.tls), which is why uvicorn
is given no certificate but this factory a TLS context. The body's read time is bounded in
the ASGI layer (extender.http.edge). Passed to uvicorn by extender.server.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from extender.http.pending import Pending
from extender.http.tls import Handshake, secured

_TIMEOUT_BODY = b'{"error": "the request headers took too long to send"}'
_TIMEOUT_REPLY = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_TIMEOUT_BODY), _TIMEOUT_BODY)
)


def protocol(pending: Pending, tls: ssl.SSLContext | None) -> Callable[..., asyncio.BaseProtocol]:
    """uvicorn's `http` protocol factory: HttpToolsProtocol connections that wait in
    `pending`, over `tls` if given (then give uvicorn no certificate of its own)."""

    class PendingProtocol(HttpToolsProtocol):
        handshake: Handshake | None = None
        _in_request = False  # a request's headers are complete, its message is not

        def connection_made(self, transport: Any) -> None:
            if self.handshake is not None:
                self.handshake.done()
            pending.wait(self)
            super().connection_made(transport)

        def data_received(self, data: bytes) -> None:
            if not self._in_request:
                pending.wait(self)
            super().data_received(data)

        def on_headers_complete(self) -> None:
            pending.done(self)
            self._in_request = True
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._in_request = False

        def on_response_complete(self) -> None:
            if self._in_request and not self.transport.is_closing():
                # Answered before its body came in (a 404 or 413 from the edge, a route that
                # reads none): nothing will read the rest, whose bytes no timer bounds; the
                # connection closes once the answer is written.
                self.transport.close()
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            pending.done(self)
            super().connection_lost(exc)

        def expire(self) -> None:
            """Called by `pending`: waited too long, or is the oldest of too many."""
            if self.transport.is_closing():
                return
            if self.cycle is None or self.cycle.response_complete:  # never inside a reply
                self.transport.write(_TIMEOUT_REPLY)
            self.transport.close()

    def factory(**kwargs: Any) -> asyncio.BaseProtocol:
        if tls is None:
            return PendingProtocol(**kwargs)

        def app(handshake: Handshake) -> asyncio.BaseProtocol:
            made = PendingProtocol(**kwargs)
            made.handshake = handshake
            return made

        return secured(app, tls, pending)

    return factory
