"""The unit tier's rule, checked: a unit test starts no process and serves nothing but a
loopback port the kernel chose (as tests/fakeapi.py and asyncio servers bound to port 0 do).
What spawns a process or listens on a chosen port belongs in tests/process.

While each unit test's setup, call and teardown run (these hooks see only tests/unit's
items, so the other tiers in the same run are not touched), the ways Python starts a process
(fork, posix_spawn, the fork-exec behind subprocess, asyncio's subprocesses and
multiprocessing, os.system) and socket.listen are replaced by checks that fail the test.
Binding alone is allowed: escher_harness's port choice probes ports by binding them. Not
seen: what bypasses Python's socket and os modules (uvloop's own servers and spawns).
"""

from __future__ import annotations

import _posixsubprocess
import contextlib
import ipaddress
import os
import socket
import subprocess
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest


class UnitTierViolation(Exception):
    """Raised where a unit test starts a process or listens on a chosen port."""


_EPHEMERAL: weakref.WeakSet[socket.socket] = weakref.WeakSet()  # bound to port 0


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _guarded(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _guarded(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    with _guarded(item):
        return (yield)


@contextlib.contextmanager
def _guarded(item: pytest.Item) -> Iterator[None]:
    seen: list[str] = []

    def refuse(what: str) -> UnitTierViolation:
        seen.append(what)  # kept even if the code under test swallows the exception
        return UnitTierViolation(f"a unit test {what}: move it to tests/process")

    def spawner(name: str) -> Callable[..., Any]:
        def spawn(*args: Any, **kwargs: Any) -> Any:
            raise refuse(f"starts a process ({name})")

        return spawn

    bind, listen = socket.socket.bind, socket.socket.listen

    def checked_bind(sock: socket.socket, address: Any) -> None:
        bind(sock, address)
        if sock.family in (socket.AF_INET, socket.AF_INET6) and address[1] == 0:
            _EPHEMERAL.add(sock)

    def checked_listen(sock: socket.socket, *backlog: int) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            host, port = sock.getsockname()[:2]
            if not _loopback(host) or sock not in _EPHEMERAL:
                raise refuse(f"listens on {host}:{port}, not a loopback port the kernel chose")
        listen(sock, *backlog)

    patches: list[tuple[Any, str, Any]] = [
        (subprocess, "_fork_exec", spawner("subprocess")),  # bound at its import
        (_posixsubprocess, "fork_exec", spawner("multiprocessing")),
        (os, "posix_spawn", spawner("os.posix_spawn")),
        (os, "posix_spawnp", spawner("os.posix_spawnp")),
        (os, "fork", spawner("os.fork")),
        (os, "forkpty", spawner("os.forkpty")),
        (os, "system", spawner("os.system")),
        (socket.socket, "bind", checked_bind),
        (socket.socket, "listen", checked_listen),
    ]
    saved = [(owner, name, vars(owner).get(name)) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in saved:
            if value is None:  # inherited (socket.socket's from _socket.socket)
                delattr(owner, name)
            else:
                setattr(owner, name, value)
        if seen:  # named first, whatever else the refusal made fail
            pytest.fail(f"{item.nodeid}: a unit test {seen[0]}; move it to tests/process")
