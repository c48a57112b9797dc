"""A Kubernetes Service in miniature, in front of the extender's replicas: a TCP proxy that
forwards each new connection to a replica whose /readyz answers 200, on each of the
Service's ports (the policy API's and, in extender mode, the verbs' mutual-TLS one).

Run as a process of its own (component `extender-proxy`, `python -m
escher_harness.localcluster.serviceproxy`) by cluster.up when ClusterSpec.replicas > 1;
kube-scheduler's urlPrefix and ClusterInfo.extender_url point at it. It behaves as kube-proxy
does for a ClusterIP Service: readiness decides which replicas are endpoints (polled here
every --poll seconds, where a cluster follows the readiness probe into the EndpointSlice), a
replica is chosen per connection (round robin over the ready ones), a connection stays with
its replica for its whole life (as conntrack keeps it), and a connection that arrives while
no replica is ready is reset (as kube-proxy rejects connections to a Service without
endpoints). Only the leader is ready, so new connections reach the leader.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import struct
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass(frozen=True)
class Backend:
    """A replica: its host and the port its /readyz is probed on (the proxy's first listening
    port forwards there), then the ports its further listening ports forward to, in order (a
    Service's further ports, as the extender's mutual-TLS verbs listener)."""

    host: str
    port: int
    more: tuple[int, ...] = ()

    def __str__(self) -> str:
        return f"{self.host}:{','.join(map(str, (self.port, *self.more)))}"

    def target(self, index: int) -> int:
        """The port the proxy's `index`-th listening port forwards to."""
        return self.port if index == 0 else self.more[index - 1]

    @classmethod
    def parse(cls, text: str) -> Backend:
        host, sep, ports = text.rpartition(":")
        numbers = ports.split(",")
        if not sep or not host or not all(p.isdigit() and 0 < int(p) < 65536 for p in numbers):
            raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT[,PORT...]")
        return cls(host, int(numbers[0]), tuple(int(p) for p in numbers[1:]))


@dataclass
class Endpoints:
    """The replicas and which of them are ready; `choose` picks the next connection's."""

    backends: tuple[Backend, ...]
    ready: dict[Backend, bool] = field(default_factory=dict)
    _turn: int = 0

    def set_ready(self, backend: Backend, ready: bool) -> bool:
        """Record a probe's answer; True when it changed the backend's readiness."""
        changed = self.ready.get(backend, False) != ready
        self.ready[backend] = ready
        return changed

    def choose(self, avoid: frozenset[Backend] = frozenset()) -> Backend | None:
        """The ready backend next in turn (round robin, in the order given), skipping `avoid`
        (the ones this connection already failed to reach); None when there is none."""
        candidates = [b for b in self.backends if self.ready.get(b, False) and b not in avoid]
        if not candidates:
            return None
        chosen = candidates[self._turn % len(candidates)]
        self._turn += 1
        return chosen


def _say(message: str) -> None:
    stamp = time.strftime("%H:%M:%S", time.localtime()) + f".{int(time.time() * 1000) % 1000:03d}"
    print(f"{stamp} {message}", flush=True)


async def _probe(endpoints: Endpoints, backend: Backend, poll: float) -> None:
    """Poll the backend's /readyz for ever; a refused, hung (a paused process) or non-200
    probe makes it not ready."""
    url = f"http://{backend.host}:{backend.port}/readyz"
    async with httpx.AsyncClient(timeout=max(2 * poll, 0.1)) as client:
        while True:
            try:
                ready = (await client.get(url)).status_code == 200
            except httpx.HTTPError:
                ready = False
            if endpoints.set_ready(backend, ready):
                _say(f"{backend} {'ready' if ready else 'not ready'}")
            await asyncio.sleep(poll)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset, as a rejected connection ends."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()


async def _connect(
    endpoints: Endpoints, index: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """A connection to a ready backend's `index`-th port, trying each ready one once; None
    if none answers."""
    tried: set[Backend] = set()
    while (backend := endpoints.choose(frozenset(tried))) is not None:
        tried.add(backend)
        port = backend.target(index)
        try:
            return await asyncio.wait_for(asyncio.open_connection(backend.host, port), 1.0)
        except (OSError, TimeoutError):
            if endpoints.set_ready(backend, False):  # gone: the next probe says when it is back
                _say(f"{backend} not ready (connection refused)")
    return None


async def _forward(
    endpoints: Endpoints,
    index: int,
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
) -> None:
    upstream = await _connect(endpoints, index)
    if upstream is None:
        _reset(client_writer)
        return
    reader, writer = upstream
    try:
        await asyncio.wait(
            [
                asyncio.create_task(_pipe(client_reader, writer)),
                asyncio.create_task(_pipe(reader, client_writer)),
            ],
            return_when=asyncio.FIRST_COMPLETED,
        )
    finally:
        # Either side gone ends the connection on both (a killed replica's connections end).
        for w in (writer, client_writer):
            w.close()


async def serve(ports: Sequence[int], backends: Sequence[Backend], poll: float) -> None:
    endpoints = Endpoints(tuple(backends))
    probes = [asyncio.create_task(_probe(endpoints, b, poll)) for b in backends]

    def forwarder(index: int) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]:
        return lambda r, w: _forward(endpoints, index, r, w)

    servers = [
        await asyncio.start_server(forwarder(i), "127.0.0.1", port, reuse_address=True)
        for i, port in enumerate(ports)
    ]
    _say(f"listening on 127.0.0.1:{ports} for {', '.join(map(str, backends))}")
    try:
        await asyncio.gather(*(server.serve_forever() for server in servers))
    finally:
        for task in probes:
            task.cancel()
        for server in servers:
            server.close()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="serviceproxy", description="forward connections to a ready replica"
    )
    p.add_argument(
        "--port",
        type=int,
        action="append",
        required=True,
        help="a port to listen on (127.0.0.1); repeat for a Service's further ports",
    )
    p.add_argument(
        "--backend",
        type=Backend.parse,
        action="append",
        required=True,
        help="HOST:PORT[,PORT...]: a replica's port for each --port, /readyz on the first",
    )
    p.add_argument("--poll", type=float, default=0.2, help="seconds between readiness probes")
    args = p.parse_args(argv)
    if any(len(b.more) != len(args.port) - 1 for b in args.backend):
        p.error(f"every --backend needs {len(args.port)} port(s), one for each --port")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.port, args.backend, args.poll))
    return 0


if __name__ == "__main__":
    sys.exit(main())
