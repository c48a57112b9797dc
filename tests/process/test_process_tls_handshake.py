"""extender.http.tls: a TLS handshake waits among the connections pending a request
(extender.http.pending) from the accept, and a silent one is aborted.

Over a real loopback socket, with a certificate from the harness's test PKI (made by
openssl, hence this tier); the Pending set itself is tests/unit/test_pending.py's.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from escher_harness.localcluster.pki import make_pki
from extender.http.pending import Pending, Why
from extender.http.tls import Handshake, secured


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, Path]:
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(str(pki.server_cert), str(pki.server_key))
    return server, pki.ca


class App(asyncio.Protocol):
    """An app protocol that says when it is made, and ends the handshake's wait then."""

    def __init__(self, handshake: Handshake, made: asyncio.Future[None]) -> None:
        self.handshake = handshake
        self.made = made

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.handshake.done()
        self.made.set_result(None)


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_a_handshake_waits_from_the_accept_and_a_silent_one_is_aborted(
    certificate: tuple[ssl.SSLContext, Path], loop_kind: str
) -> None:
    server_tls, ca = certificate

    async def go() -> None:
        loop = asyncio.get_running_loop()
        closed: list[Why] = []
        pending = Pending(10, 0.3, closed.append)
        made: asyncio.Future[None] = loop.create_future()
        server = await loop.create_server(
            lambda: secured(lambda h: App(h, made), server_tls, pending), "127.0.0.1", 0
        )
        port = server.sockets[0].getsockname()[1]
        # A silent client: it waits from its accept, and is aborted past the timeout.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.sleep(0.1)
        assert len(pending) == 1
        assert await asyncio.wait_for(reader.read(), 2) == b""  # closed by the server
        assert closed == ["timeout"] and len(pending) == 0
        writer.close()
        # A real client: its handshake is done, the app protocol is made, it waits no more.
        client_tls = ssl.create_default_context(cafile=str(ca))
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_tls)
        await asyncio.wait_for(made, 2)
        assert len(pending) == 0 and closed == ["timeout"]
        writer.close()
        server.close()

    if loop_kind == "uvloop":
        import uvloop

        uvloop.run(go())
    else:
        run(go())
