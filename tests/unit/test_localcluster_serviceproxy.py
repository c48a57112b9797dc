"""The service proxy's choice of replica and its command line, without sockets
(escher_harness.localcluster.serviceproxy)."""

from __future__ import annotations

import argparse

import pytest

from escher_harness.localcluster.serviceproxy import Backend, Endpoints

A, B, C = Backend("127.0.0.1", 1), Backend("127.0.0.1", 2), Backend("127.0.0.1", 3)


def endpoints(ready: dict[Backend, bool]) -> Endpoints:
    e = Endpoints((A, B, C))
    for backend, ok in ready.items():
        e.set_ready(backend, ok)
    return e


@pytest.mark.parametrize(
    ("ready", "picks"),
    [
        ({}, [None, None]),  # never probed: not an endpoint yet
        ({A: False, B: False, C: False}, [None]),
        ({B: True}, [B, B, B]),  # the leader alone takes every connection
        ({A: True, C: True}, [A, C, A]),  # two ready (a moment of a failover): in turn
    ],
    ids=["unprobed", "none-ready", "one-ready", "two-ready"],
)
def test_each_connection_goes_to_a_ready_replica(
    ready: dict[Backend, bool], picks: list[Backend | None]
) -> None:
    e = endpoints(ready)
    assert [e.choose() for _ in picks] == picks


def test_a_replica_that_failed_this_connection_is_skipped() -> None:
    e = endpoints({A: True, B: True})
    assert e.choose(avoid=frozenset({A})) == B
    assert e.choose(avoid=frozenset({A, B})) is None


def test_failover_moves_new_connections_to_the_new_leader() -> None:
    e = endpoints({A: True})
    assert e.choose() == A
    assert e.set_ready(A, False) is True  # the leader died or stepped down
    assert e.choose() is None  # no endpoint: the connection is reset
    assert e.set_ready(B, True) is True
    assert e.set_ready(B, True) is False  # no change, nothing to log
    assert e.choose() == B


@pytest.mark.parametrize(
    ("text", "backend"),
    [
        ("127.0.0.1:8080", Backend("127.0.0.1", 8080)),
        ("localhost:1", Backend("localhost", 1)),
        ("127.0.0.1:80,443", Backend("127.0.0.1", 80, (443,))),
    ],
    ids=["ip", "name", "two-service-ports"],
)
def test_backend_parse(text: str, backend: Backend) -> None:
    assert Backend.parse(text) == backend
    assert str(backend) == text
    assert [backend.target(i) for i in range(1 + len(backend.more))] == [
        int(p) for p in text.rsplit(":", 1)[1].split(",")
    ]


@pytest.mark.parametrize(
    "text", ["127.0.0.1", ":80", "h:port", "h:0", "h:70000", "h:1,", "h:1,x"], ids=["no-port",
    "no-host", "word", "zero", "too-big", "empty-second", "word-second"]
)  # fmt: skip
def test_backend_parse_refuses(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="is not HOST:PORT"):
        Backend.parse(text)
