"""Port choice of the local control plane (escher_harness.localcluster.ports)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from escher_harness.localcluster import ports as ports_module
from escher_harness.localcluster.errors import ClusterError
from escher_harness.localcluster.ports import allocate_ports, ensure_port_free


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = allocate_ports({"a": None, "b": None, "c": None, "d": None})
    assert list(ports) == ["a", "b", "c", "d"]
    assert len(set(ports.values())) == 4
    for port in ports.values():
        ensure_port_free(port, "test")


def test_fixed_port_is_kept(listening_port: int) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        free = sock.getsockname()[1]
    ports = allocate_ports({"etcd": None, "apiserver": free})
    assert ports["apiserver"] == free and ports["etcd"] != free


def test_taken_port_names_port_and_component(listening_port: int) -> None:
    with pytest.raises(ClusterError) as e:
        allocate_ports({"etcd": None, "apiserver": listening_port})
    assert str(e.value).startswith(f"port {listening_port} wanted by apiserver is not free")


@pytest.mark.parametrize(
    ("wanted", "message"),
    [
        ({"a": 0}, "port 0 for a is not a valid TCP port"),
        ({"a": 70000}, "port 70000 for a is not a valid TCP port"),
        ({"a": 40000, "b": 40000}, "port 40000 is wanted by both a and b"),
    ],
)
def test_bad_fixed_ports(wanted: dict[str, int | None], message: str) -> None:
    with pytest.raises(ClusterError, match=message):
        allocate_ports(wanted)


def test_free_ports_are_chosen_below_the_ephemeral_range() -> None:
    """An outgoing connection may take any ephemeral port between the choice and the
    component's bind: chosen ports stay below that range."""
    top = ports_module.below_ephemeral()
    ports = allocate_ports({f"c{i}": None for i in range(20)})
    assert all(ports_module.LOWEST <= p < top for p in ports.values()), ports
