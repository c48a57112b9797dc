"""Loopback port choice for the control plane's components.

Called by cluster.up: fixed ports given by the user are checked (fail fast, naming the port and
the component), the others are picked free below the kernel's ephemeral range. Not by binding
127.0.0.1:0: that hands out an ephemeral port, which any outgoing connection on the machine may
take between the choice and the component's bind (an extender restarted on its verbs port
found it taken 15 s later, once it led, in a test run beside other clusters).
"""

from __future__ import annotations

import contextlib
import random
import socket
from collections.abc import Mapping
from pathlib import Path

from escher_harness.localcluster.errors import ClusterError

LOWEST = 10_000  # above the ports services commonly listen on
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_TRIES = 200


def below_ephemeral() -> int:
    """The first port of the kernel's ephemeral range (Linux's default where it is unread)."""
    try:
        return int(EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _bind(port: int) -> socket.socket:
    """A socket bound to 127.0.0.1:<port> (OSError if the port is taken)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # Go's net.Listen sets SO_REUSEADDR, so a port in TIME_WAIT is free for the components.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        raise
    return sock


def _probe(port: int) -> socket.socket | None:
    """A socket bound to 127.0.0.1:<port>, or None if the port is taken."""
    try:
        return _bind(port)
    except OSError:
        return None


def ensure_port_free(port: int, component: str) -> None:
    """Raise ClusterError unless 127.0.0.1:<port> can be bound right now."""
    if not 0 < port < 65536:
        raise ClusterError(f"port {port} for {component} is not a valid TCP port")
    try:
        _bind(port).close()
    except OSError as e:
        raise ClusterError(
            f"port {port} wanted by {component} is not free on 127.0.0.1: {e.strerror}"
        ) from None


def allocate_ports(wanted: Mapping[str, int | None]) -> dict[str, int]:
    """A distinct port per component: the fixed ones after checking them, free ones otherwise."""
    fixed = {name: port for name, port in wanted.items() if port is not None}
    owners: dict[int, str] = {}
    for name, port in fixed.items():
        if port in owners:
            raise ClusterError(f"port {port} is wanted by both {owners[port]} and {name}")
        owners[port] = name
    # Duplicates are a mistake in the request whatever the machine holds: name them first.
    for name, port in fixed.items():
        ensure_port_free(port, name)
    chosen = dict(fixed)
    top = below_ephemeral()
    with contextlib.ExitStack() as held:
        # Keep every probe socket bound until all are chosen, so no port is handed out twice.
        for name in (n for n, p in wanted.items() if p is None):
            for _ in range(_TRIES):
                port = random.randrange(LOWEST, top) if top > LOWEST else 0
                sock = None if port in owners else _probe(port)
                if sock is not None:
                    break
            else:  # no free port below the range (or none below it): the kernel's choice
                sock = _probe(0)
                assert sock is not None
            held.enter_context(sock)
            port = sock.getsockname()[1]
            owners[port] = name
            chosen[name] = port
    return {name: chosen[name] for name in wanted}
