"""The e2e tier's clusters: one fixture for every module.

A module says which cluster it needs with the `cluster` marker, whose fields are
escher_harness.localcluster.ClusterSpec's:

    pytestmark = pytest.mark.cluster(nodes=4, mode="extender", node_cpu="2")

and takes `cluster` (one per module, for tests that leave it as they found it: their own
names, their own resources) or `fresh_cluster` (one per test, for tests that kill, pause or
fill it). A test's own marker adds to its module's. An indirect parameter
(`pytest.mark.parametrize("cluster", [{"mode": "pure"}], indirect=True)`) overrides both.
Teardown resumes any process a test left paused, then stops the cluster and keeps its logs.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from escher_harness import localcluster
from escher_harness.localcluster.binaries import find_binaries
from escher_harness.localcluster.errors import MissingBinaryError


def _spec(request: pytest.FixtureRequest) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    for marker in reversed(list(request.node.iter_markers("cluster"))):  # the closest wins
        spec.update(marker.kwargs)
    spec.update(getattr(request, "param", None) or {})
    return spec


def _cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[localcluster.ClusterInfo]:
    try:
        find_binaries()
    except MissingBinaryError as e:
        pytest.fail(str(e), pytrace=False)
    spec = _spec(request)
    d = tmp_path_factory.mktemp(f"cluster-{spec.get('mode', 'none')}") / "c"
    info = localcluster.up(localcluster.ClusterSpec(dir=d, **spec))
    try:
        yield info
    finally:
        for p in info.processes:  # never leave one paused for the teardown
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGCONT)
        localcluster.down(info.dir, keep_logs=True)


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[localcluster.ClusterInfo]:
    """The module's cluster, shared by its tests."""
    yield from _cluster(request, tmp_path_factory)


@pytest.fixture
def fresh_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[localcluster.ClusterInfo]:
    """A cluster of the test's own."""
    yield from _cluster(request, tmp_path_factory)
