"""Port choice of the local control plane (escher_harness.localcluster.ports)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

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


@pytest.fixture
def claims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    claims_dir = tmp_path / "claims"
    monkeypatch.setattr(ports_module, "CLAIMS", claims_dir)
    return claims_dir


def _free_ports(n: int) -> list[int]:
    """n ports below the ephemeral range that are free right now."""
    found = allocate_ports({f"p{i}": None for i in range(n)})
    return list(found.values())


def _offer(monkeypatch: pytest.MonkeyPatch, ports: list[int]) -> None:
    """Make the random choice offer `ports` in this order."""
    offered = iter(ports)
    monkeypatch.setattr(ports_module.random, "randrange", lambda _lo, _hi: next(offered))


def _claim_file(claims: Path, port: int, owner: Path, age: float = 0.0) -> None:
    claims.mkdir(exist_ok=True)
    claim = claims / str(port)
    claim.write_text(str(owner))
    then = time.time() - age
    os.utime(claim, (then, then))


@pytest.mark.parametrize(
    ("owner_running", "age", "skipped"),
    [
        (True, 0.0, True),  # another cluster's, running
        (True, 3600.0, True),  # running for an hour: still its port (a restart binds it again)
        (False, 0.0, True),  # just chosen: its cluster has not written its state file yet
        (False, 3600.0, False),  # its cluster is gone: taken over
    ],
)
def test_ports_claimed_by_another_cluster(
    claims: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    owner_running: bool,
    age: float,
    skipped: bool,
) -> None:
    first, second = _free_ports(2)
    other = tmp_path / "other" / "processes.json"
    if owner_running:
        other.parent.mkdir()
        other.write_text("{}")
    _claim_file(claims, first, other, age)
    _offer(monkeypatch, [first, second])
    mine = tmp_path / "mine" / "processes.json"
    chosen = allocate_ports({"etcd": None}, owner=mine)
    assert chosen == {"etcd": second if skipped else first}
    assert (claims / str(chosen["etcd"])).read_text() == str(mine)
    assert (claims / str(first)).read_text() == str(other if skipped else mine)


def test_release_drops_only_the_owners_claims(claims: Path, tmp_path: Path) -> None:
    mine, other = tmp_path / "mine" / "processes.json", tmp_path / "other" / "processes.json"
    ports = allocate_ports({"a": None, "b": None}, owner=mine)
    theirs = allocate_ports({"c": None}, owner=other)
    assert sorted(p.name for p in claims.iterdir()) == sorted(
        str(p) for p in [*ports.values(), *theirs.values()]
    )
    ports_module.release_claims(mine)
    assert [p.name for p in claims.iterdir()] == [str(theirs["c"])]
    ports_module.release_claims(other)
    assert list(claims.iterdir()) == []


def test_without_an_owner_nothing_is_claimed(claims: Path) -> None:
    allocate_ports({"a": None})
    assert not claims.exists()


def test_release_of_some_ports_keeps_the_owners_others(claims: Path, tmp_path: Path) -> None:
    """A failed `up` in a directory whose cluster runs drops only the ports it chose."""
    owner = tmp_path / "running" / "processes.json"
    running = allocate_ports({"a": None, "b": None}, owner=owner)
    failed = allocate_ports({"c": None}, owner=owner)
    ports_module.release_claims(owner, failed.values())
    assert sorted(p.name for p in claims.iterdir()) == sorted(str(p) for p in running.values())
    ports_module.release_claims(owner, [1])  # not claimed: nothing to do
