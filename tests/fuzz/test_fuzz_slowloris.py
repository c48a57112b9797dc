"""Slow clients against a real `escher-extender serve`, on every listener it can run.

Each listener is attacked at once by connections that never finish what they began: one
that sends nothing, one that trickles a TLS ClientHello (on TLS listeners), and, over the
listener's own transport (TLS done, with kube-scheduler's certificate where the verbs ask for
one), one that trickles its request headers a byte a second, one that sends a request, gets
its answer and then keeps the connection alive with a CR LF a second, one that trickles a
request body and, on the HTTP/2 listener, one that trickles HTTP/2's connection preface.
Meanwhile a real client (kube-scheduler's certificate on the verbs listeners) must be
answered, and every slow connection must be closed within the timeout it is held to (the
header timeout, the body timeout for the body, which gets its 408) plus a margin for a loaded
machine. Then a flood of silent connections, four times the pending limit: the real client is
still answered, and the surplus is closed at once as evicted.

The listeners are every one deploy/ and the chart open: the policy API (plain and TLS), the
verbs' HTTP/2 listener (hypercorn) and, beside it, their HTTP/1.1 listener (--verbs-http1-port,
uvicorn), each with and without a client CA; and the verbs on one HTTP/1.1 listener
(--no-verbs-http2). A process per listener configuration, with timeouts of a few seconds (the
same code as the defaults, faster). Both servers do the TLS handshake inside
extender.http.pending's bound, and so do the headers.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from escher_harness.localcluster.pki import Pki, make_pki
from escher_harness.localcluster.ports import allocate_ports

HEADER_TIMEOUT = 2.0
BODY_TIMEOUT = 4.0
PENDING = 8
MARGIN = 3.0  # a loaded 2-core machine
SLOW_FOR = BODY_TIMEOUT + MARGIN + 3.0  # how long each slow client keeps trying


@dataclass(frozen=True)
class Listener:
    name: str
    tls: bool  # the attacked port speaks TLS
    verbs: bool  # the attacked port is the verbs'
    http2: bool = True  # verbs_port serves HTTP/2 (hypercorn)
    http1_port: bool = False  # the attacked port is --verbs-http1-port, beside HTTP/2's
    client_ca: bool = True  # the verbs ask for a client certificate (mutual TLS)

    @property
    def hypercorn(self) -> bool:
        return self.verbs and self.http2 and not self.http1_port


LISTENERS = [
    Listener("api-plain", tls=False, verbs=False),
    Listener("api-tls", tls=True, verbs=False),
    Listener("verbs-http2", tls=True, verbs=True),
    Listener("verbs-http2-no-client-ca", tls=True, verbs=True, client_ca=False),
    # deploy/'s filter and prioritize listener
    Listener("verbs-http1-port", tls=True, verbs=True, http1_port=True),
    Listener("verbs-http1-port-no-client-ca", tls=True, verbs=True, http1_port=True,
             client_ca=False),
    Listener("verbs-http1", tls=True, verbs=True, http2=False),
]  # fmt: skip


@dataclass
class Served:
    port: int
    listener: Listener
    pki: Pki

    def context(self, client: bool, alpn: str = "http/1.1") -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca))
        if client:
            ctx.load_cert_chain(str(self.pki.client_cert), str(self.pki.client_key))
        ctx.set_alpn_protocols([alpn])
        return ctx

    def transport(self, alpn: str = "http/1.1") -> ssl.SSLContext | None:
        """How an attacker past the handshake talks to the port (None: plain), with the
        client certificate where the port asks for one."""
        if not self.listener.tls:
            return None
        return self.context(self.listener.verbs and self.listener.client_ca, alpn)

    def real_client(self) -> int:
        scheme = "https" if self.listener.tls else "http"
        url = f"{scheme}://127.0.0.1:{self.port}"
        if self.listener.verbs:
            body = {"Pod": {"metadata": {"uid": "u"}}, "NodeNames": ["n"]}
            verify = self.context(client=True)
            return httpx.post(f"{url}/filter", json=body, verify=verify, timeout=10).status_code
        verify = self.context(client=False) if self.listener.tls else False
        return httpx.get(f"{url}/healthz", verify=verify, timeout=10).status_code


@pytest.fixture(scope="module", params=LISTENERS, ids=[x.name for x in LISTENERS])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    listener: Listener = request.param
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    ports = allocate_ports({"api": None, "verbs": None, "verbs_http1": None})
    cert = [
        "--verbs-tls-cert-file",
        str(pki.server_cert),
        "--verbs-tls-key-file",
        str(pki.server_key),
    ]
    if listener.tls and not listener.verbs:
        cert = ["--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key)]
    env = {
        "ESCHER_HEADER_TIMEOUT_SECONDS": str(HEADER_TIMEOUT),
        "ESCHER_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT),
        "ESCHER_MAX_PENDING_CONNECTIONS": str(PENDING),
        "ESCHER_VERBS_HTTP2": str(listener.http2).lower(),
    }
    if listener.client_ca:
        cert += ["--verbs-client-ca-file", str(pki.ca)]
    if listener.http1_port:
        cert += ["--verbs-http1-port", str(ports["verbs_http1"])]
    proc = subprocess.Popen(
        [sys.executable, "-m", "extender", "serve", "--mode", "standalone",
         "--port", str(ports["api"]), "--verbs-port", str(ports["verbs"]), *cert],
        env={**__import__("os").environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    port = "verbs_http1" if listener.http1_port else "verbs" if listener.verbs else "api"
    it = Served(ports[port], listener, pki)
    deadline = time.monotonic() + 30
    while True:
        try:
            assert it.real_client() == 200
            break
        except httpx.TransportError:
            assert proc.poll() is None and time.monotonic() < deadline, "serve did not start"
            time.sleep(0.05)
    try:
        yield it
    finally:
        proc.terminate()
        proc.wait(10)


def _client_hello() -> bytes:
    """The first flight of a real TLS client, to trickle."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_side=False)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


REQUEST = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"a" * 64 + b"\r\n\r\n"
BODY = b"PUT /v1/resources/r HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
# HTTP/2's client connection preface: what a client sends before its first request's HEADERS.
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")


@dataclass(frozen=True)
class Attack:
    first: bytes  # sent at once
    pieces: list[bytes]  # then one a second
    timeout: float  # what it is held to
    transport: ssl.SSLContext | None = None  # TLS done first (None: the raw socket)


def _attacks(served: Served) -> dict[str, Attack]:
    listener = served.listener
    out = {"silent": Attack(b"", [], HEADER_TIMEOUT)}
    if listener.tls:
        out["handshake-trickled"] = Attack(
            b"", [bytes([b]) for b in _client_hello()], HEADER_TIMEOUT
        )
    # Past the handshake: only a client the port accepts (its certificate on the verbs).
    tls = served.transport()
    out["headers-trickled"] = Attack(b"", [bytes([b]) for b in REQUEST], HEADER_TIMEOUT, tls)
    out["keep-alive-trickled"] = Attack(REQUEST, [b"\r\n"] * 60, HEADER_TIMEOUT, tls)
    out["body-trickled"] = Attack(BODY, [b" "] * 99, BODY_TIMEOUT, tls)
    if listener.hypercorn:
        out["h2-preface-trickled"] = Attack(
            b"", [bytes([b]) for b in H2_PREFACE], HEADER_TIMEOUT, served.transport("h2")
        )
    return out


def _attack(port: int, attack: Attack, closed: dict[str, float], name: str) -> None:
    began = time.monotonic()
    s: socket.socket = socket.create_connection(("127.0.0.1", port))
    if attack.transport is not None:
        s.settimeout(10)
        s = attack.transport.wrap_socket(s, server_hostname="127.0.0.1")
    s.settimeout(0.25)
    first, pieces = attack.first, attack.pieces
    s.sendall(first)
    sent = began
    pieces = list(pieces)
    try:
        while time.monotonic() - began < SLOW_FOR:
            try:
                if s.recv(4096) == b"":
                    break
            except TimeoutError:
                pass
            if pieces and time.monotonic() - sent >= 1.0:
                s.sendall(pieces.pop(0))
                sent = time.monotonic()
        else:
            return  # still open: not recorded as closed
    except OSError:
        pass  # reset: closed
    finally:
        s.close()
    closed[name] = time.monotonic() - began


def test_slow_clients_are_closed_in_time_while_a_real_client_is_served(
    served: Served, tally: Counter[str]
) -> None:
    attacks = _attacks(served)
    closed: dict[str, float] = {}
    threads = [
        threading.Thread(target=_attack, args=(served.port, attack, closed, name))
        for name, attack in attacks.items()
    ]
    for t in threads:
        t.start()
    time.sleep(0.5)
    assert served.real_client() == 200  # while they are all at it
    for t in threads:
        t.join()
    tally["slowloris: slow connections"] += len(attacks)
    for name, attack in attacks.items():
        assert name in closed, f"{name}: still open after {SLOW_FOR:g}s"
        assert closed[name] <= attack.timeout + MARGIN, f"{name}: closed after {closed[name]:.1f}s"


def _closed(s: socket.socket) -> bool:
    """Whether the server closed `s` (after a 408, on a plain listener)."""
    s.settimeout(0.05)
    try:
        while s.recv(4096):
            pass
    except TimeoutError:
        return False
    except OSError:
        pass  # reset
    return True


def test_a_flood_of_silent_connections_does_not_keep_a_real_client_out(
    served: Served, tally: Counter[str]
) -> None:
    flood = [socket.create_connection(("127.0.0.1", served.port)) for _ in range(4 * PENDING)]
    try:
        time.sleep(0.5)
        assert served.real_client() == 200
        still_open = sum(not _closed(s) for s in flood)
        tally["slowloris: flooding connections"] += len(flood)
        assert still_open <= PENDING  # the rest were evicted, oldest first
    finally:
        for s in flood:
            s.close()
