"""The Kubernetes API client against a scripted API server on loopback (fakeapi.py): what
reaches the server (path, query, body, content type, bearer token), and how each failure
becomes an ApiError with the status and reason the adapters act on.

In the process tier: the token bucket, the deadlines and the retries are waited out in real time.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fakeapi import FakeAPI, Stream

from extender.kube.client import _BACKGROUND, ApiError, KubeAPI, _Bucket, background


def test_a_request_carries_its_path_query_body_and_token(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json={"kind": "Binding"})

    fake = FakeAPI(server, tmp_path)
    api = KubeAPI(fake.kubeconfig, qps=100, burst=10)

    async def scenario() -> bytes:
        async with fake:
            try:
                return await api.request(
                    "POST", "/api/v1/namespaces/a/pods/p/binding", params={"x": "1"}, body=b"{}"
                )
            finally:
                await api.aclose()

    assert json.loads(asyncio.run(scenario())) == {"kind": "Binding"}
    [r] = seen
    assert (r.method, r.url.path, dict(r.url.params)) == (
        "POST",
        "/api/v1/namespaces/a/pods/p/binding",
        {"x": "1"},
    )
    assert r.content == b"{}" and r.headers["content-type"] == "application/json"
    assert r.headers["authorization"] == "Bearer token"


@pytest.mark.parametrize(
    ("reply", "status", "reason", "message"),
    [
        (httpx.Response(404, json={"kind": "Status", "message": "pods \"p\" not found"}),
         404, "not_found", 'HTTP 404: pods "p" not found'),
        (httpx.Response(409, json={"kind": "Status", "reason": "Conflict"}),
         409, "conflict", "HTTP 409: Conflict"),
        (httpx.Response(429, content=b"slow down"), 429, "throttled", "HTTP 429: HTTP 429"),
        (httpx.Response(500, json={"message": "etcd is slow"}),
         500, "server_error", "HTTP 500: etcd is slow"),
        (httpx.ConnectError("refused"), 0, "unreachable", "the API server is unreachable"),
    ],
    ids=["not-found", "conflict", "throttled-without-status", "server-error", "unreachable"],
)  # fmt: skip
def test_each_failure_is_an_api_error_with_its_status_and_reason(
    tmp_path: Path, reply: httpx.Response | Exception, status: int, reason: str, message: str
) -> None:
    def server(request: httpx.Request) -> httpx.Response:
        if isinstance(reply, Exception):
            raise reply
        return reply

    fake = FakeAPI(server, tmp_path)
    api = KubeAPI(fake.kubeconfig)

    async def scenario() -> ApiError:
        async with fake:
            try:
                with pytest.raises(ApiError) as e:
                    await api.request("GET", "/api/v1/pods", what="listing pods")
                return e.value
            finally:
                await api.aclose()

    error = asyncio.run(scenario())
    assert (error.status, error.reason) == (status, reason)
    assert str(error).startswith(f"listing pods: {message}")


def test_a_watch_yields_each_event_line_however_the_bytes_arrive(tmp_path: Path) -> None:
    big = {"type": "ADDED", "object": {"metadata": {"name": "n" * 200_000}}}
    body = b"\n".join(json.dumps(e).encode() for e in ({"type": "ADDED"}, big)) + b"\n\n"

    fake = FakeAPI(lambda request: httpx.Response(200, content=body), tmp_path)
    api = KubeAPI(fake.kubeconfig)

    async def scenario() -> list[bytes]:
        async with fake:
            try:
                async with api.watch("/api/v1/nodes", {"watch": "true"}, 5.0) as lines:
                    return [line async for line in lines]
            finally:
                await api.aclose()

    # A line far over aiohttp's read buffer is one event, and blank lines are none.
    assert [json.loads(line) for line in asyncio.run(scenario())] == [{"type": "ADDED"}, big]


def test_a_watch_still_open_at_its_deadline_is_abandoned_even_while_events_flow(
    tmp_path: Path,
) -> None:
    """The deadline is the whole request's: a watch the server should have ended by then
    lost its connection without a word, even if something still arrives on it."""

    async def lines() -> AsyncIterator[bytes]:
        for i in itertools.count():
            yield json.dumps({"type": "ADDED", "object": {"metadata": {"name": f"p{i}"}}}).encode()
            await asyncio.sleep(0.05)

    fake = FakeAPI(lambda request: Stream(lines()), tmp_path)
    api = KubeAPI(fake.kubeconfig)

    async def scenario() -> tuple[int, ApiError]:
        got = 0
        async with fake:
            try:
                with pytest.raises(ApiError) as e:
                    async with api.watch("/api/v1/pods", {"watch": "true"}, 0.5) as stream:
                        async for _ in stream:
                            got += 1
                return got, e.value
            finally:
                await api.aclose()

    got, error = asyncio.run(scenario())
    assert 3 <= got <= 20  # events flowed, a read timeout would never have fired
    assert error.status == 0 and "the watch broke" in str(error)


def test_a_burst_of_watch_events_lets_the_loop_turn_between_batches(tmp_path: Path) -> None:
    """A gang's members created at once arrive as hundreds of events in one read: they are
    handed on in order, and the event loop gets a turn every batch of them (a verb waiting
    meanwhile is served), however they are chunked."""
    events = [{"type": "ADDED", "object": {"metadata": {"name": f"p{i}"}}} for i in range(300)]
    body = b"".join(json.dumps(e).encode() + b"\n" for e in events)

    fake = FakeAPI(lambda request: httpx.Response(200, content=body), tmp_path)
    api = KubeAPI(fake.kubeconfig)

    async def scenario() -> tuple[list[bytes], list[int]]:
        turns: list[int] = []  # how many lines were handed on when another task ran
        got: list[bytes] = []

        async def beside() -> None:
            while True:
                turns.append(len(got))
                await asyncio.sleep(0)

        async with fake:
            other = asyncio.create_task(beside())
            try:
                async with api.watch("/api/v1/pods", {"watch": "true"}, 5.0) as lines:
                    async for line in lines:
                        got.append(line)
            finally:
                other.cancel()
                await api.aclose()
        return got, turns

    got, turns = asyncio.run(scenario())
    assert [json.loads(line) for line in got] == events
    points = sorted({0, *turns, len(events)})
    assert max(b - a for a, b in itertools.pairwise(points)) <= 64


def test_background_requests_yield_the_token_bucket_to_the_others() -> None:
    """Ten background takers wait for tokens at 50 a second when one other request comes:
    it takes the next token (or the one after: one may be taken as it arrives); without
    background() it takes its chance among them (the control: over five tries, at least one
    placed it later)."""

    async def order(marked: bool) -> list[str]:
        bucket = _Bucket(qps=50, burst=1)
        await bucket.take()  # the burst spent: every taker below waits
        got: list[str] = []

        async def taker(name: str, in_background: bool) -> None:
            await bucket.take(in_background)
            got.append(name)

        takers = [asyncio.create_task(taker(f"b{i}", marked)) for i in range(10)]
        await asyncio.sleep(0.005)  # they all wait
        takers.append(asyncio.create_task(taker("policy", False)))
        await asyncio.gather(*takers)
        return got

    assert asyncio.run(order(marked=True)).index("policy") <= 1
    assert max(asyncio.run(order(marked=False)).index("policy") for _ in range(5)) > 1


def test_background_is_the_tasks_own() -> None:
    async def run() -> tuple[bool, bool]:
        inside = asyncio.Event()
        seen: list[bool] = []

        async def worker() -> None:
            with background():
                inside.set()
                await asyncio.sleep(0.01)
                seen.append(_BACKGROUND.get())

        task = asyncio.create_task(worker())
        await inside.wait()
        other = _BACKGROUND.get()  # another task, while the worker is inside
        await task
        return other, seen[0]

    assert asyncio.run(run()) == (False, True)
