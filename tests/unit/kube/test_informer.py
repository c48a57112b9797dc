"""The informer (extender.kube.informer) against an API server holding nodes
(fakeapi.Cluster): a paged list, a watch that resumes from the last version it saw, a 410 that
lists again and reports what vanished, bookmarks, malformed events, and an expired continue
token."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from fakeapi import Cluster, Stream, connected

import extender.kube.informer as informer_module
from extender.core.objects import Node
from extender.kube.informer import Handler, Informer
from extender.metrics import Metrics


@dataclass
class Seen:
    events: list[tuple[str, str]] = field(default_factory=list)
    listed: list[set[str]] = field(default_factory=list)

    def handler(self) -> Handler[Node]:
        return Handler(
            lambda kind, node: self.events.append((kind, node.metadata.name)),
            self.listed.append,
            lambda node: node.metadata.name,
        )


@contextlib.asynccontextmanager
async def informer(cluster: Cluster, tmp_path: Path, seen: Seen) -> AsyncIterator[Informer[Node]]:
    async with connected(cluster, tmp_path) as api:
        yield Informer(api, "nodes", "/api/v1/nodes", Node, seen.handler(), Metrics())


async def until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "not within the timeout"
        await asyncio.sleep(0.01)


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())  # type: ignore[arg-type]


def watching(cluster: Cluster) -> list[str]:
    """The resourceVersion each watch started from."""
    return [
        r.url.params["resourceVersion"]
        for r in cluster.requests
        if r.url.params.get("watch") == "true"
    ]


def test_a_list_of_several_pages_hands_over_every_object_then_the_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(informer_module, "_PAGE", 2)
    cluster, seen = Cluster(), Seen()
    for i in range(5):
        cluster.add_node(f"n{i}")

    async def body() -> None:
        async with informer(cluster, tmp_path, seen) as inf:
            await inf.sync()
            assert inf.synced and inf.resource_version == str(cluster.version)

    run(body)
    assert seen.events == [("ADDED", f"n{i}") for i in range(5)]
    assert seen.listed == [{f"n{i}" for i in range(5)}]
    lists = [r for r in cluster.requests if r.url.path == "/api/v1/nodes"]
    assert [r.url.params.get("continue", "") for r in lists] == ["", "2", "4"]


def test_the_watch_hands_over_changes_and_resumes_from_the_last_version(tmp_path: Path) -> None:
    cluster, seen = Cluster(), Seen()
    cluster.add_node("a")

    async def body() -> None:
        async with informer(cluster, tmp_path, seen) as inf:
            await inf.sync()
            task = asyncio.create_task(inf.run())
            cluster.add_node("b")
            cluster.put("nodes", "a", cluster.node("a"))
            await until(lambda: len(seen.events) == 3)
            last = inf.resource_version
            cluster.stop_watches()  # the server ends the watch: the next resumes from `last`
            await until(lambda: len(watching(cluster)) == 2)
            cluster.delete("nodes", "b")
            await until(lambda: len(seen.events) == 4)
            task.cancel()
            assert watching(cluster)[1] == last

    run(body)
    assert seen.events == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]


def test_a_version_too_old_lists_again_and_reports_what_vanished(tmp_path: Path) -> None:
    cluster, seen = Cluster(), Seen()
    cluster.add_node("a")
    cluster.add_node("b")

    async def body() -> None:
        async with informer(cluster, tmp_path, seen) as inf:
            await inf.sync()
            # While nobody watched: b went, c came, and the events were compacted away.
            cluster.delete("nodes", "b")
            cluster.add_node("c")
            cluster.compact()
            task = asyncio.create_task(inf.run())
            await until(lambda: len(seen.listed) == 2)
            task.cancel()

    run(body)
    assert seen.listed == [{"a", "b"}, {"a", "c"}]
    assert ("ADDED", "c") in seen.events


def test_bookmarks_move_the_version_and_malformed_events_are_skipped(tmp_path: Path) -> None:
    seen = Seen()
    lines = [
        b"not json",
        b'{"type": "ADDED", "object": {"metadata": {"name": "x", "resourceVersion": "60"}}}',
        b'{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "70"}}}',
    ]
    requests: list[str] = []

    async def server(request):  # type: ignore[no-untyped-def]
        if request.url.params.get("watch") != "true":
            return httpx.Response(200, json={"metadata": {"resourceVersion": "9"}, "items": []})
        requests.append(request.url.params["resourceVersion"])

        async def events() -> AsyncIterator[bytes]:
            if len(requests) == 1:
                for line in lines:
                    yield line
            else:
                await asyncio.sleep(10)
                yield b""

        return Stream(events())

    async def body() -> None:
        async with informer(server, tmp_path, seen) as inf:  # type: ignore[arg-type]
            await inf.sync()
            task = asyncio.create_task(inf.run())
            await until(lambda: len(requests) == 2, timeout=10)
            task.cancel()
            assert inf.resource_version == "70"

    run(body)
    assert seen.events == [("ADDED", "x")]
    assert requests == ["9", "70"]


def test_an_expired_continue_token_lists_from_the_start_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(informer_module, "_PAGE", 2)
    cluster, seen = Cluster(), Seen()
    for i in range(3):
        cluster.add_node(f"n{i}")
    cluster.fail("GET", "/api/v1/nodes", 410, param="continue")

    async def body() -> None:
        async with informer(cluster, tmp_path, seen) as inf:
            await inf.sync()

    run(body)
    assert seen.listed == [{"n0", "n1", "n2"}]
    lists = [r.url.params.get("continue", "") for r in cluster.requests]
    assert lists == ["", "2", "", "2"]
