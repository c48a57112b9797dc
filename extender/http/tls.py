"""TLS on a listener, with each handshake waiting in the listener's Pending set.

A server created with a TLS context (loop.create_server(ssl=...), as uvicorn and hypercorn
create theirs) hides a connection from its protocol until the handshake is done: until then
nothing can count it or close it, and only the loop's 60 s handshake timeout bounds it. So
the listeners create their servers without TLS and wrap each connection's protocol here in
the loop's own SSLProtocol, which is what create_server(ssl=...) does, subclassed so that the
connection's Handshake waits in `pending` from its accept until the app protocol, made once
the handshake is done, calls `done()`. Past the set's timeout or size it is aborted.

Wrapping the protocol, rather than calling loop.start_tls once the connection is made,
leaves no moment in which the client's first bytes could reach the app protocol in clear:
uvloop starts reading right after connection_made, whatever the protocol paused.

Used by extender.http.protocol (uvicorn) and extender.http.verbs_listener (hypercorn).
"""

from __future__ import annotations

import asyncio
import ssl
from asyncio import sslproto
from collections.abc import Callable
from typing import cast

import uvloop

from extender.http.pending import Pending


class Handshake:
    """A connection's TLS handshake, waiting in its listener's Pending set."""

    def __init__(self, pending: Pending) -> None:
        self._pending = pending
        self._raw: asyncio.Transport | None = None

    def began(self, raw: asyncio.Transport) -> None:
        self._raw = raw
        self._pending.wait(self)

    def done(self) -> None:
        """The handshake is done (or the connection gone): it no longer waits."""
        self._pending.done(self)

    def expire(self) -> None:
        """Called by the Pending set: handshaking too long, or the oldest of too many."""
        if self._raw is not None:
            self._raw.abort()


def secured(
    app: Callable[[Handshake], asyncio.BaseProtocol], tls: ssl.SSLContext, pending: Pending
) -> asyncio.BaseProtocol:
    """The protocol to give a new connection's transport: TLS, then `app(handshake)`, whose
    connection_made comes once the handshake is done and should call `handshake.done()`."""
    loop = asyncio.get_running_loop()
    handshake = Handshake(pending)
    ssl_protocol = _UvloopHandshaking if isinstance(loop, uvloop.Loop) else _AsyncioHandshaking
    protocol = ssl_protocol(loop, app(handshake), tls, None, server_side=True)  # type: ignore[arg-type]
    protocol.handshake = handshake
    return protocol


class _TellsHandshake:
    """Mixed into the loop's SSLProtocol: tells its Handshake when the connection is made
    and lost."""

    handshake: Handshake

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.handshake.began(cast(asyncio.Transport, transport))  # a stream's: it has abort()
        super().connection_made(transport)  # type: ignore[misc]

    def connection_lost(self, exc: BaseException | None) -> None:
        self.handshake.done()  # if lost while handshaking, no app protocol hears of it
        super().connection_lost(exc)  # type: ignore[misc]


# uvloop's transports take only its own SSLProtocol; the standard loop (tests) its own.
class _UvloopHandshaking(_TellsHandshake, uvloop.loop.SSLProtocol):  # type: ignore[misc,name-defined]
    pass


class _AsyncioHandshaking(_TellsHandshake, sslproto.SSLProtocol):
    pass
