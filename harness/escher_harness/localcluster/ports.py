"""Loopback port choice for the control plane's components.

Called by cluster.up: fixed ports given by the user are checked (fail fast, naming the port and
the component), the others are picked free below the kernel's ephemeral range. Not by binding
127.0.0.1:0: that hands out an ephemeral port, which any outgoing connection on the machine may
take between the choice and the component's bind (an extender restarted on its verbs port
found it taken 15 s later, once it led, in a test run beside other clusters).

A chosen port is also claimed, with a file in a directory every process on the machine shares,
naming the cluster it is for: a probe only shows the port free at that instant, and the
components bind seconds later (or again, on a restart), so another cluster starting beside it
could pick the same port in between (a kube-scheduler of a parallel test worker exited with
"address already in use" once). A claim lives while its cluster's state file does; cluster.down
releases it, and one whose cluster is gone is taken over by the next process that wants the port.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from escher_harness.localcluster.errors import ClusterError

LOWEST = 10_000  # above the ports services commonly listen on
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_TRIES = 200
CLAIMS = Path(tempfile.gettempdir()) / "escher-ports"
# A claim's cluster writes its state file right after the choice: until then, age alone keeps it.
CLAIM_GRACE = 120.0


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


def _claim_is_live(claim: Path) -> bool:
    try:
        owner = claim.read_text().strip()
        age = time.time() - claim.stat().st_mtime
    except OSError:
        return False  # released meanwhile
    return age < CLAIM_GRACE or (bool(owner) and Path(owner).exists())


def _claim(port: int, owner: Path) -> bool:
    """Claim `port` for the cluster whose state file is `owner`; False if a live claim has it."""
    CLAIMS.mkdir(parents=True, exist_ok=True)
    claim = CLAIMS / str(port)
    for _ in range(2):
        try:
            fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            if _claim_is_live(claim):
                return False
            claim.unlink(missing_ok=True)  # its cluster is gone: take it over
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(owner))
        return True
    return False  # another process took the stale claim over first


def claimed(owner: Path, ports: Iterable[int] | None = None) -> list[int]:
    """The ports claimed for the cluster whose state file is `owner` (of `ports`, if given)."""
    if ports is None:
        try:
            ports = [int(c.name) for c in CLAIMS.iterdir() if c.name.isdigit()]
        except FileNotFoundError:
            return []
    out = []
    for port in ports:
        with contextlib.suppress(OSError):
            if (CLAIMS / str(port)).read_text().strip() == str(owner):
                out.append(port)
    return out


def release_claims(owner: Path, ports: Iterable[int] | None = None) -> None:
    """Drop the port claims made for the cluster whose state file is `owner`: all of them
    (cluster.down), or only `ports` (an `up` that failed before its cluster existed)."""
    for port in claimed(owner, ports):
        (CLAIMS / str(port)).unlink(missing_ok=True)


def allocate_ports(wanted: Mapping[str, int | None], owner: Path | None = None) -> dict[str, int]:
    """A distinct port per component: the fixed ones after checking them, free ones otherwise.

    With `owner` (a cluster's state file) the free ones are claimed for that cluster, and ports
    other clusters claimed are passed over."""
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
                if sock is None:
                    continue
                if owner is None or _claim(port, owner):
                    break
                sock.close()
            else:  # no free port below the range (or none below it): the kernel's choice
                sock = _probe(0)
                assert sock is not None
            held.enter_context(sock)
            port = sock.getsockname()[1]
            owners[port] = name
            chosen[name] = port
    return {name: chosen[name] for name in wanted}
