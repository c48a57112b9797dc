"""Lookup of etcd, kube-apiserver, kube-scheduler, kwok and kubectl
(escher_harness.localcluster.binaries)."""

from __future__ import annotations

from pathlib import Path

import pytest

from escher_harness.localcluster.binaries import bin_dir, find_binaries, find_kubectl
from escher_harness.localcluster.errors import MissingBinaryError
from escher_harness.localcluster.paths import REPO_ROOT

NAMES = ("etcd", "kube-apiserver", "kube-scheduler", "kwok")


def fake_bin(directory: Path, names: tuple[str, ...] = NAMES, mode: int = 0o755) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(mode)
    return directory


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, REPO_ROOT / ".cache" / "bin"),
        ({"ESCHER_CACHE_DIR": "/cache"}, Path("/cache/bin")),
        ({"ESCHER_BIN_DIR": "/bins", "ESCHER_CACHE_DIR": "/cache"}, Path("/bins")),
        ({"ESCHER_BIN_DIR": ""}, REPO_ROOT / ".cache" / "bin"),
    ],
    ids=["default", "cache-dir", "bin-dir-wins", "empty-bin-dir"],
)
def test_bin_dir(env: dict[str, str], expected: Path) -> None:
    assert bin_dir(env) == expected


def test_default_is_repo_root_of_the_checkout() -> None:
    assert (REPO_ROOT / "pyproject.toml").is_file()
    assert (REPO_ROOT / "hack" / "build-binaries.sh").is_file()


def test_finds_all(tmp_path: Path) -> None:
    d = fake_bin(tmp_path / "bin")
    found = find_binaries({"ESCHER_BIN_DIR": str(d)})
    assert (found.etcd, found.kube_apiserver, found.kube_scheduler, found.kwok) == tuple(
        d / n for n in NAMES
    )


def test_kwok_is_needed_only_when_wanted(tmp_path: Path) -> None:
    d = fake_bin(tmp_path / "bin", NAMES[:3])
    assert find_binaries({"ESCHER_BIN_DIR": str(d)}, kwok=False).kwok is None
    with pytest.raises(MissingBinaryError, match=r"^kwok not found"):
        find_binaries({"ESCHER_BIN_DIR": str(d)})


@pytest.mark.parametrize("missing", NAMES)
def test_missing_binary_is_named(tmp_path: Path, missing: str) -> None:
    d = fake_bin(tmp_path / "bin", tuple(n for n in NAMES if n != missing))
    with pytest.raises(MissingBinaryError) as e:
        find_binaries({"ESCHER_BIN_DIR": str(d)})
    assert e.value.binary == missing and e.value.directory == d
    message = str(e.value)
    assert message.startswith(f"{missing} not found")
    assert str(d) in message and "make binaries" in message and "ESCHER_BIN_DIR" in message


def test_non_executable_counts_as_missing(tmp_path: Path) -> None:
    d = fake_bin(tmp_path / "bin", mode=0o644)
    with pytest.raises(MissingBinaryError, match=r"^etcd not found"):
        find_binaries({"ESCHER_BIN_DIR": str(d)})


def test_cache_dir_is_used(tmp_path: Path) -> None:
    fake_bin(tmp_path / "bin")
    assert find_binaries({"ESCHER_CACHE_DIR": str(tmp_path)}).etcd == tmp_path / "bin" / "etcd"


def test_kubectl_is_optional_and_named_when_missing(tmp_path: Path) -> None:
    d = fake_bin(tmp_path / "bin")  # the control plane without kubectl: enough for clusters
    find_binaries({"ESCHER_BIN_DIR": str(d)})
    with pytest.raises(MissingBinaryError, match=r"^kubectl not found") as e:
        find_kubectl({"ESCHER_BIN_DIR": str(d)})
    assert "make binaries" in str(e.value)
    fake_bin(d, ("kubectl",))
    assert find_kubectl({"ESCHER_BIN_DIR": str(d)}) == d / "kubectl"
