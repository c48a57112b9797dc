"""Loopback port choice for the control plane's components.

Called by cluster.up: fixed ports given by the user are checked (fail fast, naming the port and
the component), the others are picked free by binding 127.0.0.1:0.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Mapping

from escher_harness.localcluster.errors import ClusterError


def ensure_port_free(port: int, component: str) -> None:
    """Raise ClusterError unless 127.0.0.1:<port> can be bound right now."""
    if not 0 < port < 65536:
        raise ClusterError(f"port {port} for {component} is not a valid TCP port")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Go's net.Listen sets SO_REUSEADDR, so a port in TIME_WAIT is free for the components.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
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
    with contextlib.ExitStack() as held:
        # Keep every probe socket bound until all are chosen, so no port is handed out twice.
        for name in (n for n, p in wanted.items() if p is None):
            port = 0
            while port == 0 or port in owners:  # the kernel may hand out a fixed port
                sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            owners[port] = name
            chosen[name] = port
    return {name: chosen[name] for name in wanted}
