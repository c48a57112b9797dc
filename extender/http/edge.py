"""ASGI middleware at the edge, before routing: what every request is held to.

- `//` in a path is folded to `/`: a verb configured with a leading slash makes
  kube-scheduler call `<urlPrefix>//filter`.
- Bodies over `max_body_bytes` are refused with 413: by Content-Length before reading, and
  by counting while reading (chunked bodies).
- A body must arrive within `body_timeout` seconds of the request: a client that trickles it
  gets 408 (the headers' read time is bounded by extender.http.server).
- With mutual TLS on a separate listener (settings.verbs_port), kube-scheduler's verbs are
  served only there and nothing else is: the listener a request came in on decides.
- kube-scheduler's verbs go straight to their endpoint (extender.http.verbs), past the
  routing of everything else: they are the hot path.
Installed by extender.app; errors are raised as this layer's typed errors and answered by the
one table (extender.http.errors).
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from extender.http.errors import PayloadTooLarge, RequestTimeout, error_response

VERB_PATHS = frozenset({"/filter", "/prioritize", "/bind", "/preempt"})


class Edge:
    def __init__(
        self,
        app: ASGIApp,
        max_body_bytes: int,
        body_timeout: float,
        verbs: ASGIApp,
        verbs_port: int | None = None,
    ) -> None:
        self.app = app
        self.limit = max_body_bytes
        self.body_timeout = body_timeout
        self.verbs = verbs
        self.verbs_port = verbs_port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if "//" in path:
            while "//" in path:
                path = path.replace("//", "/")
            scope = dict(scope, path=path)
        if self.verbs_port is not None:
            server = scope.get("server")
            on_verbs_listener = server is not None and server[1] == self.verbs_port
            if on_verbs_listener != (path in VERB_PATHS):
                where = "the mutual-TLS listener" if path in VERB_PATHS else "the API listener"
                await error_response(404, f"{path[:200]} is served on {where} only")(
                    scope, receive, send
                )
                return
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            message = f"request body is larger than {self.limit} bytes"
            await error_response(413, message)(scope, receive, send)
            return
        seen = 0
        complete = False
        deadline = asyncio.get_running_loop().time() + self.body_timeout

        async def bounded() -> Message:
            nonlocal seen, complete
            if complete:  # after the body: a wait for the disconnect is not bounded here
                return await receive()
            try:
                # A timer, not a task: the verbs' bodies are usually read already.
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise RequestTimeout(
                    f"the request body did not arrive within {self.body_timeout:g}s"
                ) from None
            seen += len(message.get("body", b""))
            complete = not message.get("more_body", False)
            if seen > self.limit:
                raise PayloadTooLarge(f"request body is larger than {self.limit} bytes")
            return message

        await (self.verbs if path in VERB_PATHS else self.app)(scope, bounded, send)
