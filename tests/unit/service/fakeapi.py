"""A scripted Kubernetes API server on loopback, for the service's unit tests.

Each request is handed to a test's function of an httpx.Request (plain or async), and the
httpx.Response it returns is sent back; an httpx.TransportError it raises drops the
connection unanswered. The KubeAPI under test reaches it over a real
socket, through a kubeconfig, as it reaches an API server; only the answers are scripted.
Use it as an async context manager around the service's run.
"""

from __future__ import annotations

import inspect
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
from aiohttp import web

from escher_harness.localcluster.config import render_kubeconfig

Handler = Callable[[httpx.Request], httpx.Response | Awaitable[httpx.Response]]


class FakeAPI:
    def __init__(self, handler: Handler, tmp_path: Path) -> None:
        self._handler = handler
        # Bound now, served once a loop runs: the kubeconfig must name the port before the
        # service (and its KubeAPI) is made.
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.kubeconfig = tmp_path / "kubeconfig"
        self.kubeconfig.write_text(render_kubeconfig(self.url, "token"))
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> FakeAPI:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # An open watch the client closes is cancelled, not waited for.
        self._runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=0.1
        )
        await self._runner.setup()
        await web.SockSite(self._runner, self._sock).start()
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            scripted = self._handler(
                httpx.Request(
                    request.method,
                    str(request.url),
                    headers=dict(request.headers),
                    content=await request.read(),
                )
            )
            reply = await scripted if inspect.isawaitable(scripted) else scripted
        except httpx.TransportError:
            # The script says the server cannot be reached: drop the connection unanswered,
            # so that the client sees a transport failure, not an HTTP status.
            if request.transport is not None:
                request.transport.abort()
            raise web.HTTPServiceUnavailable() from None  # never reaches the client
        return web.Response(
            status=reply.status_code,
            body=reply.content,
            headers={"Content-Type": reply.headers.get("content-type", "application/json")},
        )
