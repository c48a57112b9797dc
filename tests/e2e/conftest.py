"""The e2e tier's clusters: one fixture for every module.

A module says which cluster it needs with the `cluster` marker, whose fields are
escher_harness.localcluster.ClusterSpec's:

    pytestmark = pytest.mark.cluster(nodes=4, mode="extender", node_cpu="2")

and takes `cluster` (one per module, for tests that leave it as they found it: their own
names, their own resources), `pooled_cluster` (one from the pool below, for tests that leave
nothing behind but their pods in namespace default, which are deleted after them) or
`fresh_cluster` (one per test, for tests that kill, pause or fill it). A test's own marker
adds to its module's. An indirect parameter
(`pytest.mark.parametrize("cluster", [{"mode": "pure"}], indirect=True)`) overrides both.
Teardown resumes any process a test left paused, then stops the cluster and keeps its logs.

A directory whose modules each leave the cluster as they found it may keep clusters from
module to module: its `cluster` takes `cluster_pool` and asks it for one by spec, with a check
that the module before left it clean (tests/e2e/esl does: its 11 modules once started 33
clusters, and in one process now start 4). The pool stops its clusters once the next test
to run takes no `cluster_pool` (with pytest-xdist's --dist loadfile, when the worker moves
on to another directory), or at the end of the session.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from escher_harness import localcluster
from escher_harness.kubeclient import api_client
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
    with running(_spec(request), tmp_path_factory) as info:
        yield info


@contextlib.contextmanager
def running(
    spec: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[localcluster.ClusterInfo]:
    """A cluster of `spec` (ClusterSpec's fields but dir) until the block ends."""
    try:
        find_binaries()
    except MissingBinaryError as e:
        pytest.fail(str(e), pytrace=False)
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


class ClusterPool:
    """Running clusters by spec, each handed from module to module while it is clean."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp = tmp_path_factory
        self._held: dict[str, tuple[localcluster.ClusterInfo, contextlib.ExitStack]] = {}

    def get(
        self,
        spec: dict[str, Any],
        clean: Callable[[localcluster.ClusterInfo], bool],
        wait: float = 30.0,
    ) -> localcluster.ClusterInfo:
        """A running cluster of `spec`: the one held if `clean` holds of it within `wait`
        seconds (the module before may still be deleting its pods), else a new one."""
        key = json.dumps(spec, sort_keys=True, default=repr)
        if key in self._held:
            info, stack = self._held[key]
            deadline = time.monotonic() + wait
            while not clean(info):
                if time.monotonic() > deadline:
                    del self._held[key]  # left dirty: replaced, so no module sees another's
                    stack.close()
                    break
                time.sleep(0.2)
            else:
                return info
        stack = contextlib.ExitStack()
        info = stack.enter_context(running(spec, self._tmp))
        self._held[key] = (info, stack)
        return info

    def close(self) -> None:
        """Stop every cluster held."""
        while self._held:
            _, stack = self._held.popitem()[1]
            stack.close()


_POOL = pytest.StashKey[ClusterPool]()


@pytest.fixture(scope="session")
def cluster_pool(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., localcluster.ClusterInfo]]:
    """This process's pool's `get` (one pool per xdist worker)."""
    pool = request.config.stash.setdefault(_POOL, ClusterPool(tmp_path_factory))
    try:
        yield pool.get
    finally:
        pool.close()


def no_pods(info: localcluster.ClusterInfo) -> bool:
    """Whether namespace default holds no pod (a pooled cluster's check)."""
    core = client.CoreV1Api(api_client(info.kubeconfig))
    return not core.list_namespaced_pod("default", limit=1).items


@pytest.fixture
def pooled_cluster(
    request: pytest.FixtureRequest, cluster_pool: Callable[..., localcluster.ClusterInfo]
) -> Iterator[localcluster.ClusterInfo]:
    """A cluster of the test's spec from the pool; the test's pods are deleted after it, and
    the next test of that spec gets the cluster once they are gone."""
    info = cluster_pool(_spec(request), no_pods)
    yield info
    core = client.CoreV1Api(api_client(info.kubeconfig))
    core.delete_collection_namespaced_pod("default", grace_period_seconds=0)


@pytest.hookimpl(trylast=True)  # after the module's own fixtures are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    pool = item.config.stash.get(_POOL, None)
    if pool is not None and "cluster_pool" not in getattr(nextitem, "fixturenames", ()):
        pool.close()
