"""ASGI middleware at the edge, before routing: what every request is held to.

- `//` in a path is folded to `/`: a verb configured with a leading slash makes
  kube-scheduler call `<urlPrefix>//filter`.
- Bodies over `max_body_bytes` are refused with 413: by Content-Length before reading, and
  by counting while reading (chunked bodies).
- A body must arrive within `body_timeout` seconds of the request: a client that trickles it
  gets 408 (the headers' read time is bounded by extender.http.protocol).
- A body must be UTF-8, as JSON text is (RFC 8259): anything else is refused with 400 naming
  the body, checked chunk by chunk as it is read (no copy for the usual ASCII body). The
  decoders behind would find such bytes only where they read strings (msgspec), or guess
  another encoding (Python's json takes UTF-16 and surrogates).
- With mutual TLS on listeners of their own (settings.listen.verbs_port, and verbs_http1_port),
  kube-scheduler's verbs are served only there and nothing else is: the listener a request
  came in on decides.
- kube-scheduler's verbs go straight to their endpoint (extender.http.verbs), past the
  routing of everything else: they are the hot path.
Installed by extender.app; errors are raised as this layer's typed errors and answered by the
one table (extender.http.errors).
"""

from __future__ import annotations

import asyncio
import codecs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from extender.http.errors import PayloadTooLarge, RequestTimeout, error_response
from extender.wire import BadRequest

VERB_PATHS = frozenset({"/filter", "/prioritize", "/bind", "/preempt"})


class Edge:
    def __init__(
        self,
        app: ASGIApp,
        max_body_bytes: int,
        body_timeout: float,
        verbs: ASGIApp,
        verbs_ports: frozenset[int] = frozenset(),
    ) -> None:
        self.app = app
        self.limit = max_body_bytes
        self.body_timeout = body_timeout
        self.verbs = verbs
        self.verbs_ports = verbs_ports

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if "//" in path:
            while "//" in path:
                path = path.replace("//", "/")
            scope = dict(scope, path=path)
        if self.verbs_ports:
            server = scope.get("server")
            on_verbs_listener = server is not None and server[1] in self.verbs_ports
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
        body = _Body(receive, self.limit, self.body_timeout)
        await (self.verbs if path in VERB_PATHS else self.app)(scope, body.receive, send)


class _Body:
    """A request's `receive`, held to the edge's rules: the body within its time and size, and
    UTF-8 (checked as its chunks arrive; a sequence may span two). An object rather than a
    closure: a call held open (a gang member at the bind barrier) keeps it alive, and this is
    two objects for the garbage collector to walk where a closure and its cells were nine."""

    __slots__ = ("_complete", "_deadline", "_limit", "_receive", "_seen", "_timeout", "_utf8")

    def __init__(self, receive: Receive, limit: int, timeout: float) -> None:
        self._receive = receive
        self._limit = limit
        self._timeout = timeout
        self._deadline = asyncio.get_running_loop().time() + timeout
        self._seen = 0
        self._complete = False
        self._utf8: codecs.IncrementalDecoder | None = None

    async def receive(self) -> Message:
        if self._complete:  # after the body: a wait for the disconnect is not bounded here
            return await self._receive()
        try:
            # A timer, not a task: the verbs' bodies are usually read already.
            async with asyncio.timeout_at(self._deadline):
                message = await self._receive()
        except TimeoutError:
            raise RequestTimeout(
                f"the request body did not arrive within {self._timeout:g}s"
            ) from None
        chunk = message.get("body", b"")
        self._seen += len(chunk)
        self._complete = not message.get("more_body", False)
        if self._seen > self._limit:
            raise PayloadTooLarge(f"request body is larger than {self._limit} bytes")
        self._check_utf8(chunk, self._seen - len(chunk))
        return message

    def _check_utf8(self, chunk: bytes, offset: int) -> None:
        if self._utf8 is None and chunk.isascii():
            return  # the usual body: nothing to decode, nothing pending
        if self._utf8 is None:
            self._utf8 = codecs.getincrementaldecoder("utf-8")()
        pending = len(self._utf8.getstate()[0])  # bytes of a sequence the last chunk began
        try:
            self._utf8.decode(chunk, self._complete)
        except UnicodeDecodeError as e:
            at = offset - pending + e.start
            raise BadRequest(f"body is not valid UTF-8: {e.reason} at byte {at}", "body") from None
