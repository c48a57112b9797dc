"""uvicorn's HTTP protocol with a header read timeout.

uvicorn bounds idle keep-alive connections but not a client that trickles its request line
and headers: each such connection would stay open for ever. This protocol gives every request
`header_timeout` seconds from its first byte (or from the connection, for one that sends
nothing) to finish its headers, and answers 408 and closes otherwise. The body's read time
is bounded in the ASGI layer (extender.http.edge). Passed to uvicorn by extender.cli.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_TIMEOUT_BODY = b'{"error": "the request headers took too long to send"}'
_TIMEOUT_REPLY = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_TIMEOUT_BODY), _TIMEOUT_BODY)
)


def protocol(header_timeout: float) -> type[HttpToolsProtocol]:
    """An HttpToolsProtocol class with the given header timeout."""

    class HeaderTimeoutProtocol(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(header_timeout, self._expired)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _expired(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.transport.write(_TIMEOUT_REPLY)
                self.transport.close()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderTimeoutProtocol
