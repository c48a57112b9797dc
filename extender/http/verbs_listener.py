"""The verbs' mutual-TLS listener, over HTTP/2, open while this replica is ready.

kube-scheduler's filter, prioritize, bind and preempt calls come here when the service has a
verbs port (settings.listen.verbs_port, as deploy/ runs it) and its verbs_http2 is on (the
default); the policy API stays on uvicorn, and so do the verbs with verbs_http2 off.

Why HTTP/2. kube-scheduler calls an extender through Go's http.Transport with its defaults,
which keep at most two idle connections per host. A gang's members wait at the bind barrier,
each holding its call open, so over HTTP/1.1 every member past the second opens a new
connection, a TCP and a mutual-TLS handshake on its way to bind, and after the burst all but
two are closed again: 20 gangs of 8 members opened 129 connections. Offered `h2` by ALPN,
kube-scheduler's transport (which configures HTTP/2 for TLS) sends every call as a stream of
one connection, and a bind held at the barrier costs a stream. uvicorn has no HTTP/2;
hypercorn has, and serves on this event loop. HTTP/1.1 is offered too.

Why only while ready. An HTTP/2 connection lives as long as both ends keep it, and HTTP/2
has no `Connection: close` (which the other listener sends with a 503, so a client kept
alive on a follower reconnects to the leader through the Service). So the listener is open
only while the service is ready (its ledger is built and, with leader election, it leads):
a replica that steps down closes it, its connections are told to go away once their calls
in flight are answered (calls still held after the graceful timeout are ended, and fail),
and kube-scheduler's next connection reaches the leader.

Limits, as on the other listener: requests in progress beyond `max_concurrency` are answered
503 (and one connection carries at most STREAMS_PER_CONNECTION of them); a connection's TLS
handshake and its first request's headers must be done within `header_timeout_seconds` of its
accept, and so must each later request's headers over HTTP/1.1 from their first byte
(`_Timed`), and connections waiting for them are bounded in number (extender.http.pending),
which is why `_serve` wraps each connection in extender.http.tls rather than let hypercorn's
`serve` start a TLS server, which hides a connection until its handshake completes. hypercorn
itself bounds only an idle connection (keep_alive_timeout, 90 s), and a connection sending a
request's headers a byte at a time counts as idle. Over HTTP/2 only the first request is
timed: kube-scheduler's client pings a connection it has not heard from for a while, and
those bytes begin no request; past its first request the connection has shown
kube-scheduler's certificate and a well-formed request. Headers are at most hypercorn's 16
KiB; bodies are bounded by the edge (extender.http.edge). An idle connection is closed after
IDLE_SECONDS, Go's own idle timeout, so kube-scheduler rather than the server decides when its
connection is idle. Started by extender.server.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, SupportsIndex

from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.asyncio.worker_context import WorkerContext
from hypercorn.config import Config
from hypercorn.events import Event, Updated
from hypercorn.utils import wrap_app
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from extender.http import h2streams
from extender.http.errors import error_response
from extender.http.pending import Pending
from extender.http.tls import Handshake, secured

log = logging.getLogger(__name__)

IDLE_SECONDS = 90.0  # Go's http.DefaultTransport IdleConnTimeout
# Streams one connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS): what one
# connection's state is bounded by. kube-scheduler's Go client opens another connection when
# one is full, so a gang of 1,024 held at the bind barrier takes two. (hypercorn's own stream
# scheduler, which extender.http.h2streams replaces, held at most 1,000 and dropped the
# connection at the 1,001st.)
STREAMS_PER_CONNECTION = 900
READY_POLL_SECONDS = 0.05


def config(
    host: str,
    port: int,
    certificate: tuple[Path, Path],
    client_ca: Path | None,
    *,
    max_concurrency: int,
) -> Config:
    c = Config()
    c.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    c.certfile, c.keyfile = str(certificate[0]), str(certificate[1])
    if client_ca is not None:
        c.ca_certs = str(client_ca)
        c.verify_mode = ssl.CERT_REQUIRED
    c.alpn_protocols = ["h2", "http/1.1"]
    c.h2_max_concurrent_streams = min(max_concurrency, STREAMS_PER_CONNECTION)
    c.keep_alive_timeout = IDLE_SECONDS
    # hypercorn closes a connection after 1,000 requests by default: kube-scheduler would
    # pay a handshake every 1,000 calls. HTTP/2's own stream ids end a connection at 2**30.
    c.keep_alive_max_requests = 2**31
    c.include_server_header = False
    c.accesslog = None
    c.errorlog = logging.getLogger("hypercorn.error")  # through the service's JSON logging
    return c


_HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"upgrade"})


class Limited:
    """The app, with at most `limit` requests in progress (more are answered 503 at once).
    Over HTTP/2, a reply is held to what HTTP/2 asks (`_Http2Call`). Knows its calls in
    progress, so a closing listener can end them (`stop_calls`)."""

    def __init__(self, app: ASGIApp, limit: int, drain_limit: int) -> None:
        self.app = app
        self.limit = limit
        self.drain_limit = drain_limit
        self.calls: set[asyncio.Task[Any]] = set()  # hypercorn's task of each call

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("http_version") == "2":
            call = _Http2Call(receive, send, self.drain_limit)
            receive, send = call.receive, call.send
        if len(self.calls) >= self.limit:
            why = f"more than {self.limit} requests in progress"
            await error_response(503, why)(scope, receive, send)
            return
        task = asyncio.current_task()
        assert task is not None  # hypercorn runs each call as a task
        self.calls.add(task)
        try:
            await self.app(scope, receive, send)
        finally:
            self.calls.discard(task)

    def stop_calls(self) -> None:
        """Cancel every call in progress. One whose reply has not begun gets none (hypercorn's
        500 for it names a header HTTP/2 forbids, and is dropped): kube-scheduler sees the
        call fail and tries the pod again."""
        for task in self.calls:
            task.cancel()


class _Http2Call:
    """A call's receive and send over HTTP/2, where a reply must differ from HTTP/1.1's:

    - No HTTP/1.1 hop-by-hop header (a protocol error in HTTP/2; a 503 says
      `Connection: close`).
    - The rest of the request body is read before the reply's last frame is sent. hypercorn
      0.18 forgets a stream once its reply is complete, and body data arriving for it
      afterwards raises KeyError in its HTTP/2 handler, which drops the whole connection with
      every call in flight on it (pgjones/hypercorn#329, fixes unreleased). A reply sent
      before the body is read is common here: a 503 from a replica stepping down or over the
      limit, a 413. So the rest of the body is read and dropped first, up to `limit` bytes
      (past that, the reply is sent regardless: a client that sends more than that may lose
      its connection).

    One object with slots, not closures: a call held open (a gang member at the bind
    barrier) keeps it alive, and the garbage collector walks it in every full collection.
    """

    __slots__ = ("_receive", "_send", "complete", "limit")

    def __init__(self, receive: Receive, send: Send, limit: int) -> None:
        self._receive, self._send, self.limit = receive, send, limit
        self.complete = False

    async def receive(self) -> Message:
        message = await self._receive()
        self._note(message)
        return message

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", ()) if k not in _HOP_BY_HOP]
            message = {**message, "headers": headers}
        elif kind == "http.response.body" and not message.get("more_body", False):
            dropped = 0
            while not self.complete and dropped <= self.limit:
                got = await self._receive()
                self._note(got)
                dropped += len(got.get("body", b""))
        await self._send(message)

    def _note(self, message: Message) -> None:
        if message["type"] == "http.disconnect" or not message.get("more_body", False):
            self.complete = True


async def serve_while_ready(
    app: Limited, cfg: Config, pending: Pending, ready: Callable[[], bool], stop: asyncio.Event
) -> None:
    """Serve `app` by `cfg` whenever `ready()` holds, until `stop` is set. Raises what
    serving raised (a port already taken, a certificate that does not load)."""
    h2streams.install()
    while not stop.is_set():
        while not ready():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(READY_POLL_SECONDS):
                    await stop.wait()
            if stop.is_set():
                return
        closing = asyncio.Event()
        serving = asyncio.create_task(_serve(app, cfg, pending, closing))
        while ready() and not stop.is_set() and not serving.done():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(READY_POLL_SECONDS):
                    await stop.wait()
        if serving.done():
            serving.result()  # it stopped by itself: raise why
            return
        closing.set()
        try:
            await serving
        except Exception as e:
            # The connections' failures are retrieved in _close, not raised; should closing
            # raise all the same, the listener is closed and opens again when ready.
            log.warning("the verbs listener closed with an error", extra={"error": repr(e)})


async def _serve(app: Limited, cfg: Config, pending: Pending, closing: asyncio.Event) -> None:
    """hypercorn's worker_serve for one TLS socket, with the handshake in `pending`: until
    `closing` is set, then as gracefully as hypercorn (calls in flight get
    cfg.graceful_timeout to finish), and never for longer than a few times that (`_close`)."""
    loop = asyncio.get_running_loop()
    tls = cfg.create_ssl_context()
    assert tls is not None  # config() always gives a certificate
    wrapped = wrap_app(app, cfg.wsgi_max_body_size, "asgi")  # type: ignore[arg-type]
    context = WorkerContext(None)
    connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    async def connected(
        handshake: Handshake, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        # The handshake's wait goes on until the first request's headers are in (_Timed).
        task = asyncio.current_task()
        assert task is not None
        connections[task] = writer
        task.add_done_callback(lambda done: connections.pop(done, None))
        ssl_object = writer.get_extra_info("ssl_object")
        http2 = ssl_object is not None and ssl_object.selected_alpn_protocol() == "h2"
        assert isinstance(reader, _Reader)
        try:
            await _Timed(handshake, pending, reader, not http2, wrapped, loop, cfg, context, writer)
        except* KeyError as e:
            # hypercorn's HTTP/2 handler on data for a stream it has closed (see _Http2Call):
            # the connection is gone, the client reconnects; not an error of this service.
            log.warning("an HTTP/2 connection was dropped", extra={"error": repr(e.exceptions)})

    def accepted() -> asyncio.BaseProtocol:
        # What asyncio.start_server(ssl=...) builds (its reader limit too), with the
        # handshake in `pending`.
        reader = _Reader(limit=2**16, loop=loop)
        return secured(
            lambda handshake: asyncio.StreamReaderProtocol(
                reader, functools.partial(connected, handshake), loop=loop
            ),
            tls,
            pending,
        )

    (sock,) = cfg.create_sockets().secure_sockets
    server = await loop.create_server(accepted, sock=sock, backlog=cfg.backlog)
    try:
        await closing.wait()
    finally:
        await context.terminated.set()  # idle connections close; HTTP/2 ones are told to go
        server.close()
        await server.wait_closed()
        await _close(connections, app, cfg.graceful_timeout)


class _Reader(asyncio.StreamReader):
    """A connection's stream, telling `arrived` (once set) of each piece of data."""

    arrived: Callable[[], None] | None = None

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:
        if self.arrived is not None and data:
            self.arrived()
        super().feed_data(data)


class _Timed(TCPServer):
    """hypercorn's connection, its requests' headers held to the Pending set's timeout.

    It waits in `pending` (as `waiter`, the connection's Handshake, which aborts it) from its
    accept until its first request's headers are in: hypercorn's Updated(idle=False), sent
    once a request (HTTP/1.1) or a stream (HTTP/2) is created. With `each_request`
    (HTTP/1.1), once idle again it waits anew from the first byte of its next request."""

    def __init__(
        self,
        waiter: Handshake,
        pending: Pending,
        reader: _Reader,
        each_request: bool,
        app: Any,
        loop: asyncio.AbstractEventLoop,
        cfg: Config,
        context: WorkerContext,
        writer: asyncio.StreamWriter,
    ) -> None:
        super().__init__(app, loop, cfg, context, {}, reader, writer)
        self._waiter, self._pending, self._each_request = waiter, pending, each_request
        self._idle = False  # between requests, not waiting for one's headers yet
        reader.arrived = self._arrived

    def _arrived(self) -> None:
        if self._idle:
            self._idle = False
            self._pending.wait(self._waiter)

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, Updated):
            if not event.idle:
                self._idle = False
                self._pending.done(self._waiter)
            elif self._each_request:
                self._idle = True
        await super().protocol_send(event)


async def _close(
    connections: dict[asyncio.Task[None], asyncio.StreamWriter], app: Limited, grace: float
) -> None:
    """Give the calls in progress `grace` seconds to be answered, then end them, and their
    connections; never wait for ever, so the listener can open again when ready."""
    if not connections:
        return
    every = dict(connections)
    _, late = await asyncio.wait(every, timeout=grace)
    if late:
        # The calls first, while their connections can still send their answers. hypercorn,
        # cancelling a connection, also cancels the task that sends its replies, and a call
        # cancelled after that could wait for ever in hypercorn's clean-up of it (seen: a
        # replica that stepped down with binds held did not listen again when it led again,
        # its closing stuck on the connection's last call).
        app.stop_calls()
        _, late = await asyncio.wait(late, timeout=grace)
    for task in late:
        task.cancel()
    if late:
        _, late = await asyncio.wait(late, timeout=grace)
    for task in every.keys() - late:
        if not task.cancelled():
            task.exception()  # retrieved: a connection that failed closing is closed all the same
    if late:
        # Its client is told at least: it reconnects rather than wait for an answer.
        for task in late:
            every[task].transport.abort()
        log.warning(
            "connections of the verbs listener did not close; left behind",
            extra={"connections": len(late)},
        )
