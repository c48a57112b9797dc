"""The service's client of the Kubernetes API: async, pooled, rate-limited, on the event loop.

Where the server is and how to authenticate comes from the official kubernetes client's
loaders (a kubeconfig, or the pod's service account with its rotated token), so every auth
form they support works here. Requests go through one aiohttp session: no thread is held
while the API server answers, binds and patches run concurrently over a connection pool,
and TLS runs in the event loop's own transport. aiohttp rather than httpx: its C parser and
the loop's TLS transport take a Binding POST at about half httpx's client-side cost on the
bind burst of a gang (httpx goes through anyio's TLS stream and a few thousand Python calls
a request). Requests other than watches share a token bucket (qps, burst), the same budget
kube-scheduler's clientConnection gives itself; requests made under `background()` (the
write-back's passes over every node) take a token only when no other request waits for one,
so a pass of 5,000 node patches never holds up a policy's write or a bind.

Every failure is an ApiError, and `reason` maps it to a short, bounded label for metrics and
logs: this module is the one place that reads the API server's Status objects. Used by the
every Kubernetes side (cluster view, write-back, binder, leader election, authentication).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

AUTH_REFRESH_SECONDS = 60.0
# A request's, unless it says. The connection itself must be made within 5 s (sock_connect),
# but a wait for a free connection of the pool counts only against the total: a gang's 1,024
# Bindings at once queue for the pool's 64 connections, and aiohttp's `connect` timeout,
# which counts that wait, failed 301 of 1,100 of them as "unreachable".
_TIMEOUT = aiohttp.ClientTimeout(total=30.0, sock_connect=5.0)


class ApiError(Exception):
    """A Kubernetes API call failed. `status` is the HTTP status (0: no answer)."""

    def __init__(self, status: int, message: str, what: str = "") -> None:
        self.status = status
        self.message = message
        super().__init__(f"{what}: {message}" if what else message)

    @property
    def reason(self) -> str:
        """A short label: unreachable, unauthorized, forbidden, not_found, conflict, gone,
        throttled, server_error, rejected."""
        s = self.status
        if s == 0:
            return "unreachable"
        return {
            401: "unauthorized",
            403: "forbidden",
            404: "not_found",
            409: "conflict",
            410: "gone",
            429: "throttled",
        }.get(s, "server_error" if s >= 500 else "rejected")


class _Status(msgspec.Struct):
    message: str = ""
    reason: str = ""
    code: int = 0


def status_message(body: bytes, fallback: str) -> str:
    """The message of a Status object the API server answered with, else `fallback`."""
    try:
        status = msgspec.json.decode(body, type=_Status)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return fallback
    return status.message or status.reason or fallback


_BACKGROUND: ContextVar[bool] = ContextVar("kubeapi_background", default=False)


@contextmanager
def background() -> Iterator[None]:
    """The requests this task makes inside yield the token bucket to every other request
    (asyncio gives each task its own copy of the context, so only this task's)."""
    token = _BACKGROUND.set(True)
    try:
        yield
    finally:
        _BACKGROUND.reset(token)


class _Bucket:
    """A token bucket: `qps` tokens a second, at most `burst` saved up. A background taker
    takes a token only while no other taker waits for one."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = float(burst)
        self.tokens = float(burst)
        self.at = time.monotonic()
        self.waiting = 0  # takers other than background ones, waiting for a token

    async def take(self, background: bool = False) -> None:
        if background:
            await self._take(lambda: not self.waiting)
            return
        self.waiting += 1
        try:
            await self._take(lambda: True)
        finally:
            self.waiting -= 1

    async def _take(self, allowed: Callable[[], bool]) -> None:
        while True:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.at) * self.qps)
            self.at = now
            if self.tokens >= 1 and allowed():
                self.tokens -= 1
                return
            # Until the next token, or (a background taker yielding) a token's time.
            await asyncio.sleep((1 - self.tokens if self.tokens < 1 else 1) / self.qps)


class KubeAPI:
    def __init__(
        self,
        kubeconfig: Path | None = None,
        *,
        in_cluster: bool = False,
        qps: float = 50.0,
        burst: int = 100,
        max_connections: int = 64,
    ) -> None:
        # Imported here: only the kube modes load the official client (its import is slow
        # and the standalone mode needs none of it).
        from kubernetes import client as k8s_client
        from kubernetes import config as k8s_config

        cfg = k8s_client.Configuration()
        if in_cluster:
            k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=None if kubeconfig is None else str(kubeconfig),
                client_configuration=cfg,
            )
        self._cfg = cfg
        self._auth: str | None = None
        self._auth_until = 0.0
        verify = ssl.create_default_context(cafile=cfg.ssl_ca_cert if cfg.verify_ssl else None)
        if not cfg.verify_ssl:
            verify.check_hostname = False
            verify.verify_mode = ssl.CERT_NONE
        if cfg.cert_file:
            verify.load_cert_chain(cfg.cert_file, cfg.key_file)
        self._ssl = verify
        # Joined by hand: a server URL may have a path (an API proxy's), which a base_url
        # would drop for absolute paths.
        self.host = cfg.host.rstrip("/")
        self._max_connections = max_connections
        self._slots = asyncio.Semaphore(max_connections)
        self._session: aiohttp.ClientSession | None = None
        self._bucket = _Bucket(qps, burst)

    def _http(self) -> aiohttp.ClientSession:
        # Made on first use: a session belongs to the running loop, which the service's
        # constructor does not run in.
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    ssl=self._ssl if self.host.startswith("https:") else False,
                    limit=self._max_connections,
                ),
                timeout=_TIMEOUT,
                # trust_env stays off: the API server is reached directly, never through a
                # cluster-wide egress proxy injected into the pod's environment (nor with
                # ~/.netrc credentials, which aiohttp would add with it).
            )
        return self._session

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        now = time.monotonic()
        if now >= self._auth_until:
            # The loader's refresh hook re-reads a rotated service-account token, and costs
            # a scan of the environment: once a minute, as client-go re-reads its token file.
            self._auth = self._cfg.get_api_key_with_prefix("BearerToken", alias="authorization")
            self._auth_until = now + AUTH_REFRESH_SECONDS
        if self._auth:
            headers["Authorization"] = self._auth
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
        timeout: float | None = None,
        what: str = "",
    ) -> bytes:
        """One call; the body of a 2xx reply, else ApiError."""
        await self._bucket.take(_BACKGROUND.get())
        limit = _TIMEOUT if timeout is None else aiohttp.ClientTimeout(timeout, sock_connect=5.0)
        try:
            # A request is built only once a connection of the pool is its to take: a burst of
            # a thousand (a gang's Bindings, its members' nominations) then costs a future
            # each to wait, not a thousand requests built in one turn of the event loop. The
            # wait counts against the request's total, as aiohttp's own pool wait did.
            async with (
                asyncio.timeout(limit.total),
                self._slots,
                self._http().request(
                    method,
                    self.host + path,
                    params=params,
                    data=body,
                    headers=self._headers(content_type or ("application/json" if body else None)),
                    timeout=limit,
                ) as resp,
            ):
                content = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as e:
            raise ApiError(
                0, f"the API server is unreachable: {type(e).__name__}: {e}", what
            ) from e
        if status >= 300:
            message = status_message(content, f"HTTP {status}")
            raise ApiError(status, f"HTTP {status}: {message}", what)
        return content

    @asynccontextmanager
    async def watch(
        self, path: str, params: Mapping[str, str], deadline: float
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """A watch's newline-delimited JSON events, as they arrive (not rate-limited: one
        long request), abandoned (ApiError) `deadline` seconds after it began: the caller
        asks the server to end it sooner (timeoutSeconds), so one still open then lost its
        connection without a word. A deadline for the whole request, not a read timeout:
        aiohttp re-arms that timer on every chunk received, which is every event."""
        try:
            async with self._http().get(
                self.host + path,
                params=params,
                headers=self._headers(),
                timeout=aiohttp.ClientTimeout(total=deadline, connect=5.0),
            ) as resp:
                if resp.status >= 300:
                    body = await resp.read()
                    message = status_message(body, f"HTTP {resp.status}")
                    raise ApiError(resp.status, f"HTTP {resp.status}: {message}", path)
                yield _lines(resp)
        except (aiohttp.ClientError, TimeoutError) as e:
            raise ApiError(0, f"the watch broke: {type(e).__name__}: {e}", path) from e

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


# Events handed on between two turns of the event loop: a chunk can carry hundreds (a gang's
# members created at once), each decoded and handled where it is yielded to.
_LINES_PER_TURN = 64


async def _lines(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    # Not resp.content.readline(): it refuses lines over its buffer, and a watch event of a
    # large object is one line. Lines are cut at an offset, not by slicing off what is
    # left: that copied the rest of a large chunk once per line (63 ms for 2 MB).
    buf = b""
    handed = 0
    async for chunk in resp.content.iter_any():
        buf += chunk
        start = 0
        while (i := buf.find(b"\n", start)) >= 0:
            line, start = buf[start:i], i + 1
            if line.strip():
                yield line
                handed += 1
                if handed % _LINES_PER_TURN == 0:
                    await asyncio.sleep(0)
        buf = buf[start:]
    if buf.strip():
        yield buf


def merge_patch(body: Any) -> tuple[bytes, str]:
    """A JSON merge patch (RFC 7386) body and its content type."""
    return msgspec.json.encode(body), "application/merge-patch+json"
