#!/usr/bin/env python3
"""What each ASGI server costs the extender per verb exchange, for the verbs' listener.

Starts the extender standalone once per server: `serve --mode standalone` with the verbs on
their own listener as deploy/ runs them (mutual TLS: hypercorn for HTTP/2, uvicorn with
ESCHER_VERBS_HTTP2=false) or as deploy/overlays/sidecar does (`--verbs-plain`, uvicorn on
loopback), and the same app embedded in granian (Rust: hyper and rustls; its embedded
server, which runs the app on this process's event loop as the service needs, with its TLS
client verification), by this script. Then it sends the verb calls kube-scheduler sends
(filter or prioritize with 1,000 NodeNames) one after another over a kept-alive connection,
in interleaved rounds, and prints per setup the extender's CPU per call (from /proc: the
server's side alone; the client is httpx, whose pure-Python HTTP/2 is in the round trip but
not in that figure), the client round trip p50/p99, and whether a caller without
kube-scheduler's certificate is refused. granian is not a dependency of the project:

    .venv/bin/pip install granian==2.8.7
    .venv/bin/python hack/verbs-server-cost.py [--calls 1000] [--rounds 3] [--verb prioritize]
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from escher_harness.bench.latency import args as verb_args
from escher_harness.localcluster.pki import make_pki
from escher_harness.localcluster.ports import allocate_ports


@dataclass(frozen=True)
class Server:
    """One extender process: its verbs listener's server and transport."""

    name: str
    env: dict[str, str]
    tls: bool
    granian: bool = False


@dataclass(frozen=True)
class Setup:
    server: str
    http2: bool
    label: str = field(default="")


SERVERS = (
    Server("hypercorn", {}, tls=True),
    Server("uvicorn", {"ESCHER_VERBS_HTTP2": "false"}, tls=True),
    Server("granian", {}, tls=True, granian=True),
    Server("uvicorn-plain", {}, tls=False),
    Server("granian-plain", {}, tls=False, granian=True),
)
SETUPS = (
    Setup("hypercorn", True, "mutual TLS, HTTP/2, hypercorn"),
    Setup("hypercorn", False, "mutual TLS, HTTP/1.1, hypercorn"),
    Setup("uvicorn", False, "mutual TLS, HTTP/1.1, uvicorn"),
    Setup("granian", True, "mutual TLS, HTTP/2, granian"),
    Setup("granian", False, "mutual TLS, HTTP/1.1, granian"),
    Setup("uvicorn-plain", False, "plain HTTP/1.1 on loopback, uvicorn"),
    Setup("granian-plain", False, "plain HTTP/1.1 on loopback, granian"),
)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100)[98]


def wait(url: str, **kw: Any) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1, **kw)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not come up")


def calls(client: httpx.Client, verb: str, body: bytes, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = client.post(f"/{verb}", content=body, headers={"Content-Type": "application/json"})
        out.append((time.perf_counter() - t) * 1000)
        if r.status_code != 200:
            raise RuntimeError(f"{verb} answered {r.status_code}: {r.text[:200]}")
    return out


async def granian(port: int, tls: tuple[Path, Path, Path] | None) -> None:
    """The standalone extender's app, verbs and all on one listener, in granian's embedded
    server on this event loop, over mutual TLS with `tls` (certificate, key, client CA)."""
    from granian.constants import HTTPModes, Interfaces, SSLProtocols
    from granian.server.embed import Server as Granian

    from extender.app import create_app
    from extender.service import Service
    from extender.settings import Settings

    settings = Settings(mode="standalone", token="t", port=port, log_level="WARNING")
    service = Service(settings)
    app = create_app(settings, service, lifecycle=False)
    await service.start()
    cert, key, ca = tls if tls else (None, None, None)
    await Granian(
        app, address="127.0.0.1", port=port, interface=Interfaces.ASGINL, http=HTTPModes.auto,
        websockets=False, log_enabled=False, ssl_cert=cert, ssl_key=key, ssl_ca=ca,
        ssl_client_verify=ca is not None, ssl_protocol_min=SSLProtocols.tls12,
    ).serve()  # fmt: skip


def main() -> None:
    if sys.argv[1:2] == ["--granian"]:  # the child that serves granian (below)
        port, *files = sys.argv[2:]
        import uvloop

        tls = (Path(files[0]), Path(files[1]), Path(files[2])) if files else None
        uvloop.run(granian(int(port), tls))
        return
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--calls", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--verb", choices=("filter", "prioritize"), default="prioritize")
    p.add_argument("--nodes", type=int, default=1000)
    opts = p.parse_args()
    body = json.dumps(verb_args(opts.nodes)).encode()
    procs: dict[str, subprocess.Popen[bytes]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        pki = make_pki(Path(tmp))
        ports = allocate_ports({f"{s.name}{k}": None for s in SERVERS for k in ("", "-verbs")})
        ctx = ssl.create_default_context(cafile=str(pki.ca))
        ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
        bare = ssl.create_default_context(cafile=str(pki.ca))  # no client certificate
        urls: dict[str, str] = {}
        try:
            for s in SERVERS:
                port, verbs = ports[s.name], ports[f"{s.name}-verbs"]
                argv = ["-m", "extender", "serve", "--mode", "standalone", "--token", "t",
                        "--log-level", "WARNING", "--port", str(port),
                        "--verbs-port", str(verbs)]  # fmt: skip
                if s.tls:
                    argv += ["--tls-cert-file", str(pki.server_cert),
                             "--tls-key-file", str(pki.server_key),
                             "--verbs-client-ca-file", str(pki.ca)]  # fmt: skip
                else:
                    argv += ["--verbs-plain"]
                if s.granian:  # one listener, verbs and all
                    port = verbs
                    files = [pki.server_cert, pki.server_key, pki.ca] if s.tls else []
                    argv = [__file__, "--granian", str(port), *map(str, files)]
                procs[s.name] = subprocess.Popen(
                    [sys.executable, *argv],
                    env={**os.environ, **s.env},
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                scheme = "https" if s.tls else "http"
                urls[s.name] = f"{scheme}://127.0.0.1:{verbs}"
                wait(f"{scheme}://127.0.0.1:{port}/readyz", verify=ctx)
            refused = {}
            for s in SERVERS:
                if s.tls:
                    try:
                        with httpx.Client(base_url=urls[s.name], verify=bare) as c:
                            c.post(f"/{opts.verb}", content=body)
                        refused[s.name] = "NOT refused"
                    except httpx.HTTPError as e:
                        refused[s.name] = f"refused ({type(e).__name__})"
            kept: dict[str, list[float]] = {x.label: [] for x in SETUPS}
            cpu: dict[str, list[float]] = {x.label: [] for x in SETUPS}
            for rnd in range(opts.rounds):
                for x in SETUPS:
                    kw: dict[str, Any] = {"base_url": urls[x.server], "http2": x.http2}
                    if urls[x.server].startswith("https"):
                        kw["verify"] = ctx
                    with httpx.Client(timeout=30, **kw) as client:
                        calls(client, opts.verb, body, 50)  # warm the connection and the path
                        before = cpu_seconds(procs[x.server].pid)
                        kept[x.label] += calls(client, opts.verb, body, opts.calls)
                        used = cpu_seconds(procs[x.server].pid) - before
                        cpu[x.label].append(used / opts.calls * 1000)
                print(f"round {rnd + 1}/{opts.rounds} done", file=sys.stderr)
        finally:
            for proc in procs.values():
                proc.terminate()
                proc.wait(10)
    print(f"{opts.verb}, {opts.nodes} NodeNames, {opts.calls} calls a round, {opts.rounds} rounds")
    print("| setup | extender CPU ms a call, median [per round] | round trip p50 ms | p99 ms |")
    print("|---|---|---|---|")
    for x in SETUPS:
        rounds = ", ".join(f"{v:.2f}" for v in cpu[x.label])
        print(f"| {x.label} | {statistics.median(cpu[x.label]):.2f} [{rounds}] "
              f"| {statistics.median(kept[x.label]):.2f} | {p99(kept[x.label]):.2f} |")  # fmt: skip
    for name, outcome in refused.items():
        print(f"{name}: a caller without kube-scheduler's certificate: {outcome}")


if __name__ == "__main__":
    main()
