"""Running the service: its start, its HTTP listeners, and its stop.

The service starts first (a misconfiguration it cannot retry past ends here, with one line
on stderr and exit status 2), then the app is served: by uvicorn on `port`, everything, or,
with `verbs_port`, the policy API there and kube-scheduler's verbs on a second TLS listener
(its own certificate, or the service's) that requires a client certificate signed by
`verbs_client_ca_file` when one is given. The verbs listener speaks HTTP/2 and is open while
the service is ready (extender.http.verbs_listener says why), or with `verbs_http2` off is a
second uvicorn listener, HTTP/1.1 only and cheaper per call. uvicorn's listeners use the
header-timeout protocol (extender.http.protocol); all refuse requests beyond
`max_concurrency` with 503. SIGTERM stops both and then the service. Called by extender.cli.
"""

from __future__ import annotations

import asyncio
import ssl
import sys

import uvicorn
from hypercorn.config import Config as HypercornConfig

from extender.app import create_app
from extender.http import verbs_listener
from extender.http.protocol import protocol
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


def _configs(settings: Settings, app: object) -> list[uvicorn.Config]:
    """uvicorn's listeners: `port`, and the verbs' when they are HTTP/1.1 only."""
    s = settings
    common: dict[str, object] = {
        "log_config": None,
        "access_log": False,
        "lifespan": "off",
        # No X-Forwarded-* rewriting: nothing in front of the service is trusted to set them.
        "proxy_headers": False,
        "server_header": False,
        "http": protocol(s.header_timeout_seconds),
        "limit_concurrency": s.max_concurrency,
        "ssl_certfile": str(s.tls_cert_file) if s.tls_cert_file else None,
        "ssl_keyfile": str(s.tls_key_file) if s.tls_key_file else None,
    }
    configs = [uvicorn.Config(app, host=s.host, port=s.port, **common)]  # type: ignore[arg-type]
    certificate = s.verbs_certificate()
    if s.verbs_port is not None and certificate is not None and not s.verbs_http2:
        verbs = {**common, "ssl_certfile": str(certificate[0]), "ssl_keyfile": str(certificate[1])}
        if s.verbs_client_ca_file is not None:
            verbs |= {
                "ssl_ca_certs": str(s.verbs_client_ca_file),
                "ssl_cert_reqs": ssl.CERT_REQUIRED,
            }
        configs.append(uvicorn.Config(app, host=s.host, port=s.verbs_port, **verbs))  # type: ignore[arg-type]
    return configs


def _http2_verbs_config(settings: Settings) -> HypercornConfig | None:
    """The verbs' HTTP/2 listener (hypercorn), unless they are HTTP/1.1 only."""
    s = settings
    certificate = s.verbs_certificate()
    if s.verbs_port is None or certificate is None or not s.verbs_http2:
        return None
    return verbs_listener.config(
        s.host,
        s.verbs_port,
        certificate,
        s.verbs_client_ca_file,
        max_concurrency=s.max_concurrency,
        handshake_timeout=s.header_timeout_seconds,
    )


async def _serve(settings: Settings) -> int:
    service = Service(settings)
    app = create_app(settings, service, lifecycle=False)
    try:
        await service.start()
    except StartupError as e:
        print(f"escher-extender serve: {e}", file=sys.stderr)
        await service.stop()
        return 2
    servers = [uvicorn.Server(c) for c in _configs(settings, app)]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(s.serve()) for s in servers]
    verbs = _http2_verbs_config(settings)
    if verbs is not None:
        limited = verbs_listener.Limited(app, settings.max_concurrency)
        ready = lambda: service.ready()[0]  # noqa: E731
        tasks.append(
            asyncio.create_task(verbs_listener.serve_while_ready(limited, verbs, ready, stop))
        )
    failed = ""
    try:
        # uvicorn handles the signals: when one listener stops, stop them all.
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for s in servers:
            s.should_exit = True
        stop.set()
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(outcome, BaseException):
                failed = f"{type(outcome).__name__}: {outcome}"
    finally:
        await service.stop()
    if failed:
        print(f"escher-extender serve: the verbs listener failed: {failed}", file=sys.stderr)
    return 0 if all(s.started for s in servers) and not failed else 1
