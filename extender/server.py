"""Running the service: its start, its HTTP listeners, and its stop.

The service starts first (a misconfiguration it cannot retry past ends here, with one line
on stderr and exit status 2), then the app is served: by uvicorn on `port`, everything, or,
with `verbs_port`, the policy API there and kube-scheduler's verbs on a second TLS listener
(its own certificate, or the service's) that requires a client certificate signed by
`verbs_client_ca_file` when one is given. The verbs listener speaks HTTP/2 and is open while
the service is ready (extender.http.verbs_listener says why), or with `verbs_http2` off is a
second uvicorn listener, HTTP/1.1 only and cheaper per call. Each listener bounds the
connections that have not sent a request yet (extender.http.pending), and so does its own TLS
handshake: uvicorn's through extender.http.protocol, which is why uvicorn is given the TLS
context of the listener rather than its certificate. All refuse requests beyond
`max_concurrency` with 503. With `verbs_http1_port` the verbs also have an HTTP/1.1 listener
(uvicorn, the same TLS) beside the HTTP/2 one, for the scheduler entries that call one pod
at a time: deploy/ points filter and prioritize there and keeps bind, whose gang members wait
at the barrier in calls held open, on HTTP/2. The process's garbage collector is set here
too (extender.collector: the startup freeze, the collections timed, full ones deferred while
gang members bind). SIGTERM stops them all and then the service. Called by extender.cli.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import ssl
import sys
from collections.abc import Iterator
from pathlib import Path

import uvicorn
from hypercorn.config import Config as HypercornConfig

from extender import collector
from extender.app import create_app
from extender.http import verbs_listener
from extender.http.pending import Pending
from extender.http.protocol import protocol
from extender.listen import ListenArgs
from extender.metrics import Metrics
from extender.service import Service, StartupError
from extender.settings import Settings


def run(settings: Settings) -> int:
    # Worker threads (policy calls, ESL steps) hand the GIL back to the event loop every
    # millisecond instead of every five: a verb that arrives while one computes waits less.
    sys.setswitchinterval(0.001)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvicorn[standard] brings it
        return asyncio.run(_serve(settings))
    return uvloop.run(_serve(settings))


class _Listener(uvicorn.Server):
    """A uvicorn listener that leaves the signals to _serve. uvicorn's own handling re-raises
    SIGTERM once its listener has stopped, which ended the process before the service's stop
    (so the lease was never released, and a rollout waited out a whole lease duration)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _on_signals(servers: list[uvicorn.Server], stop: asyncio.Event) -> None:
    """SIGTERM and SIGINT stop every listener; the service stops after them. A second one
    stops them without waiting for their open connections."""

    def handle() -> None:
        for s in servers:
            s.force_exit = s.should_exit
            s.should_exit = True
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, handle)


def _configs(listen: ListenArgs, app: object, metrics: Metrics) -> list[uvicorn.Config]:
    """uvicorn's listeners: `port`, the verbs' when they are HTTP/1.1 only, and their
    HTTP/1.1 listener beside the HTTP/2 one (`verbs_http1_port`). Raises
    OSError or ssl.SSLError when a certificate does not load."""
    s = listen
    common: dict[str, object] = {
        "log_config": None,
        "access_log": False,
        "lifespan": "off",
        # No X-Forwarded-* rewriting: nothing in front of the service is trusted to set them.
        "proxy_headers": False,
        "server_header": False,
        "limit_concurrency": s.max_concurrency,
    }
    api_tls = None
    if s.tls_cert_file is not None and s.tls_key_file is not None:
        api_tls = server_tls((s.tls_cert_file, s.tls_key_file), None)
    api = protocol(pending(s, metrics, "api"), api_tls)
    configs = [uvicorn.Config(app, host=s.host, port=s.port, http=api, **common)]  # type: ignore[arg-type]
    http1 = [s.verbs_http1_port] if s.verbs_http1_port is not None else []
    if s.verbs_port is not None and _verbs_server(s) == "uvicorn":
        http1.append(s.verbs_port)
    certificate = s.verbs_certificate()
    tls = server_tls(certificate, s.verbs_client_ca_file) if http1 and certificate else None
    for port in http1:
        verbs = protocol(pending(s, metrics, "verbs"), tls)
        host = s.verbs_address()
        # Kept as long as kube-scheduler's transport keeps an idle connection (uvicorn's 5 s
        # would have it handshake again after every pause), as on the HTTP/2 listener.
        idle = {**common, "timeout_keep_alive": int(verbs_listener.IDLE_SECONDS)}
        configs.append(uvicorn.Config(app, host=host, port=port, http=verbs, **idle))  # type: ignore[arg-type]
    return configs


def pending(listen: ListenArgs, metrics: Metrics, listener: str) -> Pending:
    """A listener's set of connections that wait for a request (extender.http.pending)."""
    closed = metrics.pending_closed
    return Pending(
        listen.max_pending_connections,
        listen.header_timeout_seconds,
        lambda why: closed.labels(listener, why).inc(),
    )


def server_tls(certificate: tuple[Path, Path], client_ca: Path | None) -> ssl.SSLContext:
    """A listener's TLS context: its certificate and, with `client_ca`, mutual TLS."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(certificate[0]), str(certificate[1]))
    if client_ca is not None:
        context.load_verify_locations(str(client_ca))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _verbs_server(s: ListenArgs) -> str:
    """Which server the verbs' own listener runs on: hypercorn for HTTP/2 (over TLS, the only
    way kube-scheduler's client speaks it), else uvicorn, cheaper per call."""
    return "hypercorn" if s.verbs_certificate() is not None and s.verbs_http2 else "uvicorn"


def _http2_verbs_config(s: ListenArgs) -> HypercornConfig | None:
    """The verbs' HTTP/2 listener (hypercorn), unless they are HTTP/1.1 only."""
    certificate = s.verbs_certificate()
    if s.verbs_port is None or certificate is None or _verbs_server(s) != "hypercorn":
        return None
    return verbs_listener.config(
        s.verbs_address(),
        s.verbs_port,
        certificate,
        s.verbs_client_ca_file,
        max_concurrency=s.max_concurrency,
    )


async def _serve(settings: Settings) -> int:
    # The garbage collector's startup freeze: here, in the process's own entry only.
    service = Service(settings, on_built=collector.freeze if settings.gc_freeze else None)
    app = create_app(settings, service, lifecycle=False)
    try:
        await service.start()
    except StartupError as e:
        print(f"escher-extender serve: {e}", file=sys.stderr)
        await service.stop()
        return 2
    try:
        servers: list[uvicorn.Server] = [
            _Listener(c) for c in _configs(settings.listen, app, service.metrics)
        ]
    except (OSError, ssl.SSLError) as e:
        print(f"escher-extender serve: the certificate does not load: {e}", file=sys.stderr)
        await service.stop()
        return 2
    unwatch = collector.watch(service.metrics)
    deferral: asyncio.Task[None] | None = None
    if settings.gc_defer_full_seconds > 0:
        binding = lambda: service.verbs.members_binding > 0  # noqa: E731
        most = settings.gc_defer_full_seconds
        deferral = asyncio.create_task(collector.defer_full(binding, most, service.metrics))
    stop = asyncio.Event()
    _on_signals(servers, stop)
    tasks = [asyncio.create_task(s.serve()) for s in servers]
    verbs = _http2_verbs_config(settings.listen)
    if verbs is not None:
        limited = verbs_listener.Limited(
            app, settings.listen.max_concurrency, settings.listen.max_body_bytes
        )
        ready = lambda: service.ready()[0]  # noqa: E731
        waiting = pending(settings.listen, service.metrics, "verbs")
        tasks.append(
            asyncio.create_task(
                verbs_listener.serve_while_ready(limited, verbs, waiting, ready, stop)
            )
        )
    failed = ""
    try:
        # When one listener stops (a signal, or a failure), stop them all.
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for s in servers:
            s.should_exit = True
        stop.set()
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(outcome, BaseException):
                failed = f"{type(outcome).__name__}: {outcome}"
    finally:
        if deferral is not None:
            deferral.cancel()
            await asyncio.gather(deferral, return_exceptions=True)
        await service.stop()
        unwatch()
    if failed:
        print(f"escher-extender serve: the verbs listener failed: {failed}", file=sys.stderr)
    return 0 if all(s.started for s in servers) and not failed else 1
