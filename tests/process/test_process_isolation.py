"""The event loop is not held by other work, and what callers can create stays bounded, in a
real `escher-extender serve` process (standalone, 5,000 nodes):

- the filter's latency does not move while /metrics is scraped in a tight loop and ESL
  steps run (they read the cluster state of every node);
- 10,000 requests to random unknown paths and 10,000 filter calls for distinct gang members
  leave its memory and its /metrics flat.

Latencies are printed for the record; the assertions are what must hold (no thread or lock
held for work proportional to the nodes stands between kube-scheduler and its answer)."""

from __future__ import annotations

import secrets
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgspec
import pytest

from escher_harness.bench.latency import TOKEN, BackgroundLoad, Server

NODES = [f"node-{i}" for i in range(5000)]
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    process = Server(tmp_path_factory.mktemp("serve") / "extender.log")
    try:
        yield process.url, process.proc.pid
    finally:
        process.stop()


def filter_body(uid: str, gang: str = "") -> bytes:
    meta: dict[str, object] = {"name": uid, "namespace": "default", "uid": uid}
    if gang:
        meta["labels"] = {"escher.io/gang": gang}
        meta["annotations"] = {"escher.io/gang-min": "2"}
    pod = {
        "metadata": meta,
        "spec": {"containers": [{"resources": {"limits": {"escher.io/x": "1"}}}]},
    }
    return msgspec.json.encode({"Pod": pod, "NodeNames": NODES})


def p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[98]


def filter_latencies(client: httpx.Client, n: int) -> list[float]:
    body, out = filter_body("bench"), []
    for _ in range(n):
        start = time.perf_counter()
        r = client.post("/filter", content=body, headers={"Content-Type": "application/json"})
        out.append((time.perf_counter() - start) * 1000)
        assert r.status_code == 200
    return out


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


# Latency under load against latency quiet, in one run: other tests' processes would be load
# (even at the lowest priority: `make test` ran it beside the niced workers, and the busy p99
# came out 29 ms against a quiet 6). The memory test is not timed: it runs beside the others.
@pytest.mark.alone
def test_filter_latency_does_not_move_under_scrapes_and_esl_steps(
    server: tuple[str, int],
) -> None:
    url, _ = server
    with httpx.Client(base_url=url, timeout=30) as client:
        client.post("/filter", content=filter_body("learn"))  # learns the 5,000 nodes
        assert client.put("/v1/resources/x", json={"capacity": 4}, headers=AUTH).is_success
        for esl in (
            {"kind": "loadbalance", "body": {"name": "lb", "mode": "dynamic"}},
            {"kind": "queues", "body": {"name": "q", "weights": {"a": 1, "b": 2}, "slots": 40}},
            {"kind": "binpack", "body": {"name": "bp"}},
        ):
            r = client.post(f"/v1/esl/{esl['kind']}", json=esl["body"], headers=AUTH)
            assert r.status_code in (201, 202), r.text
        filter_latencies(client, 200)  # warm
        quiet = filter_latencies(client, 1500)
        # A second process scrapes /metrics, steps an ESL and changes a resource.
        with BackgroundLoad(url, TOKEN):
            busy = filter_latencies(client, 1500)
    print(
        f"\nfilter at 5,000 nodes, client round trip: quiet p50 {statistics.median(quiet):.2f} "
        f"p99 {p99(quiet):.2f} ms; under scrapes, ESL steps and resource changes p50 "
        f"{statistics.median(busy):.2f} p99 {p99(busy):.2f} ms"
    )
    # Both processes share two cores: the load takes CPU, it must not take the loop.
    assert p99(busy) <= 3 * p99(quiet) + 5


def test_memory_and_metrics_stay_flat_under_random_paths_and_gang_filters(
    server: tuple[str, int],
) -> None:
    url, pid = server
    with httpx.Client(base_url=url, timeout=30) as client:
        short = msgspec.json.encode({"Pod": {"metadata": {"uid": "w"}}, "NodeNames": NODES[:3]})

        def gang_filters(n: int) -> None:
            for i in range(n):
                gang = secrets.token_hex(6)
                body = msgspec.json.decode(filter_body(f"{gang}-{i}", gang))
                body["NodeNames"] = NODES[:3]
                assert client.post("/filter", json=body).status_code == 200

        def random_paths(n: int) -> None:
            for _ in range(n):
                assert (
                    client.get(f"/{secrets.token_hex(8)}/{secrets.token_hex(4)}").status_code == 404
                )

        client.post("/filter", content=short)
        random_paths(500)
        gang_filters(500)
        before, metrics_before = rss(pid), len(client.get("/metrics").text)
        random_paths(10_000)
        gang_filters(10_000)
        after, metrics_after = rss(pid), len(client.get("/metrics").text)
    print(
        f"\nRSS before {before / 2**20:.1f} MiB, after 10,000 random paths and 10,000 gang "
        f"filters {after / 2**20:.1f} MiB; /metrics {metrics_before} -> {metrics_after} bytes"
    )
    assert after - before < 8 * 2**20
    assert metrics_after - metrics_before < 2000  # counters grow in value, not in series
