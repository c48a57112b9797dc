"""pytest fixtures that run the local control plane for a test or a whole session.

Registered by tests/conftest.py (`pytest_plugins = ["escher_harness.pytest_plugin"]`).
`local_cluster` is a factory: `local_cluster(nodes=5, mode="extender")` takes ClusterSpec's
fields (dir defaults to a fresh temporary directory) and every cluster it made is torn down
after the test, pass or fail. `shared_cluster` is one 3-node cluster (mode none) per session.
Both fail, rather than skip, when the binaries are missing: an e2e run without them is broken.
Teardown keeps each cluster's logs in pytest's temporary directory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from escher_harness.localcluster.binaries import find_binaries
from escher_harness.localcluster.cluster import ClusterInfo, ClusterSpec, down, up
from escher_harness.localcluster.errors import MissingBinaryError

ClusterFactory = Callable[..., ClusterInfo]


def pytest_configure(config: pytest.Config) -> None:
    # pytest resets warning filters around each test, undoing escher_harness.kubeclient's; the
    # local apiserver's certificate is self-signed and only ever reached on loopback.
    config.addinivalue_line(
        "filterwarnings",
        "ignore:Unverified HTTPS request is being made to host '127.0.0.1'"
        ":urllib3.exceptions.InsecureRequestWarning",
    )


@pytest.fixture
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterFactory]:
    _require_binaries()
    dirs: list[Path] = []

    def make(**spec: Any) -> ClusterInfo:
        spec.setdefault("dir", tmp_path_factory.mktemp("cluster"))
        dirs.append(spec["dir"])
        return up(ClusterSpec(**spec))

    try:
        yield make
    finally:
        for d in reversed(dirs):
            down(d, keep_logs=True)


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterInfo]:
    _require_binaries()
    d = tmp_path_factory.mktemp("shared-cluster")
    try:
        yield up(ClusterSpec(dir=d, nodes=3))
    finally:
        down(d, keep_logs=True)


def _require_binaries() -> None:
    try:
        find_binaries()
    except MissingBinaryError as e:
        pytest.fail(str(e), pytrace=False)
