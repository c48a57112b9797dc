"""The longest event-loop stall one request can cause: /healthz probed in a tight loop while
the heaviest single requests the service accepts are sent, one at a time.

The extender runs standalone (`serve --mode standalone`, escher_harness.bench.latency.Server) with
5,000 nodes learnt. A probe thread sends GET /healthz back to back on its own connection and
records each answer's time; /healthz is O(1) on the loop, so its slowest answer while a heavy
request is in flight is how long that request held the loop (plus the probe's own round
trip, given by the quiet baseline). The heavy requests: filter with a full NodeList of 5,000
Node objects (the protocol's costliest decode), filter naming 5,000 nodes, a resource set
on every node, the cluster state of every node, and a body just under the size limit.
Called by `escher-extender bench stall` (escher_harness.cli).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import msgspec

from escher_harness.bench.latency import TOKEN, Server, args, node, pod

NODES = 5000
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class Probe:
    """GET /healthz back to back in a thread; `worst()` is the slowest answer since `reset`."""

    def __init__(self, url: str) -> None:
        self._client = httpx.Client(base_url=url, timeout=60)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._worst = 0.0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            start = time.perf_counter()
            self._client.get("/healthz")
            took = time.perf_counter() - start
            with self._lock:
                self._worst = max(self._worst, took)

    def reset(self) -> None:
        with self._lock:
            self._worst = 0.0

    def worst(self) -> float:
        with self._lock:
            return self._worst

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._client.close()


def heavy_requests(limit: int) -> list[tuple[str, Callable[[httpx.Client], httpx.Response]]]:
    node_list = msgspec.json.encode(
        {"Pod": pod("ephemeral"), "Nodes": {"items": [node(i) for i in range(NODES)]}}
    )
    by_name = msgspec.json.encode(args(NODES))
    big = b'{"capacity": 1, "pad": "' + b"x" * (limit - 64) + b'"}'
    json = {"Content-Type": "application/json"}
    return [
        (f"filter, NodeList of {NODES} nodes ({len(node_list) >> 20} MiB)",
         lambda c: c.post("/filter", content=node_list, headers=json)),
        (f"filter, {NODES} node names",
         lambda c: c.post("/filter", content=by_name, headers=json)),
        (f"set a resource on all {NODES} nodes",
         lambda c: c.put("/v1/resources/stall", json={"capacity": 3}, headers=AUTH)),
        (f"cluster state of {NODES} nodes",
         lambda c: c.get("/v1/cluster-state", headers=AUTH)),
        (f"a {limit >> 20} MiB body (the limit) on the policy API",
         lambda c: c.put("/v1/resources/big", content=big, headers={**json, **AUTH})),
        (f"delete the resource on all {NODES} nodes",
         lambda c: c.delete("/v1/resources/stall", headers=AUTH)),
    ]  # fmt: skip


def run(out: Path, repeat: int = 5, progress: Callable[[str], None] = print) -> str:
    """Measure, print and return a markdown table (also written to out/stall.md)."""
    out.mkdir(parents=True, exist_ok=True)
    server = Server(out / "extender.log")
    rows = []
    try:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            client.post("/filter", content=msgspec.json.encode(args(NODES)))  # learn the nodes
            probe = Probe(server.url)
            try:
                time.sleep(2)
                probe.reset()
                time.sleep(3)
                quiet = probe.worst()
                progress(f"stall: quiet /healthz worst {quiet * 1000:.1f} ms")
                limit = 32 << 20
                for name, send in heavy_requests(limit):
                    worst, took = [], []
                    for _ in range(repeat):
                        probe.reset()
                        start = time.perf_counter()
                        status = send(client).status_code
                        took.append(time.perf_counter() - start)
                        time.sleep(0.05)  # the probe's request in flight comes back
                        worst.append(probe.worst())
                    progress(
                        f"stall: {name}: status {status}, /healthz worst {max(worst) * 1000:.1f} ms"
                    )
                    rows.append((name, status, max(took), max(worst)))
            finally:
                probe.close()
    finally:
        server.stop()
    lines = [
        f"/healthz probed back to back while each request ran ({repeat} times each); quiet "
        f"worst {quiet * 1000:.1f} ms",
        "",
        "| request | status | request took (max, ms) | /healthz worst (ms) |",
        "|---|---|---|---|",
        *(f"| {n} | {s} | {t * 1000:.1f} | {w * 1000:.1f} |" for n, s, t, w in rows),
    ]
    table = "\n".join(lines)
    (out / "stall.md").write_text(table + "\n")
    return table
