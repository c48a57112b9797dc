"""Locates the etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok binaries,
and kubectl.

Called by cluster.up before anything is written or started, so a missing binary fails fast;
kwok and kube-controller-manager are looked for only when the cluster runs them. kubectl is
optional: only the tests of the deploy/ manifests need it (find_kubectl).
$ESCHER_BIN_DIR wins (for users who already have binaries); otherwise the directory
hack/build-binaries.sh fills: ${ESCHER_CACHE_DIR:-<repo>/.cache}/bin.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from escher_harness.localcluster.errors import MissingBinaryError
from escher_harness.localcluster.paths import cache_dir


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of the control-plane binaries; kwok and kube-controller-manager None
    when they are not wanted."""

    etcd: Path
    kube_apiserver: Path
    kube_scheduler: Path
    kwok: Path | None
    kube_controller_manager: Path | None = None


def bin_dir(env: Mapping[str, str] = os.environ) -> Path:
    """The directory the binaries are looked up in."""
    explicit = env.get("ESCHER_BIN_DIR")
    return Path(explicit) if explicit else cache_dir(env) / "bin"


def find_binaries(
    env: Mapping[str, str] = os.environ, *, kwok: bool = True, controller_manager: bool = False
) -> Binaries:
    """The binaries (kwok only if `kwok`, kube-controller-manager only if
    `controller_manager`), or MissingBinaryError naming the first missing."""
    directory = bin_dir(env).absolute()
    return Binaries(
        etcd=_find("etcd", directory),
        kube_apiserver=_find("kube-apiserver", directory),
        kube_scheduler=_find("kube-scheduler", directory),
        kwok=_find("kwok", directory) if kwok else None,
        kube_controller_manager=(
            _find("kube-controller-manager", directory) if controller_manager else None
        ),
    )


def find_kubectl(env: Mapping[str, str] = os.environ) -> Path:
    """kubectl (built with the others), or MissingBinaryError."""
    return _find("kubectl", bin_dir(env).absolute())


def find_tool(name: str, env: Mapping[str, str] = os.environ) -> Path:
    """A Go tool the tests drive (helm, promtool: hack/build-tools.sh), or MissingBinaryError."""
    return _find(name, bin_dir(env).absolute())


def _find(name: str, directory: Path) -> Path:
    path = directory / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise MissingBinaryError(name, directory)
    return path
