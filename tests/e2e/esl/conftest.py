"""The ESL end-to-end tests' `env`: each test module runs once per approach, on a cluster in
the approach's mode, 4 nodes of 4 cpu.

The modules share their clusters (tests/e2e/conftest.py's cluster_pool): a module gets the
cluster the module before used on the same approach once the pods that one left are deleted
and no ESL's resource (in mode dra, no claim) is left (Env.torn_down checks the resources at
the end of every test), else a new cluster; so each module starts from a cluster as a fresh
one is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from builders import cluster_of
from esl_harness import APPROACHES, MODES, Env
from kubernetes import client

from escher_harness import localcluster


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "env" in metafunc.fixturenames:
        metafunc.parametrize(
            "cluster",
            [{"nodes": 4, "node_cpu": "4", **cluster_of(MODES[a])} for a in APPROACHES],
            ids=APPROACHES,
            indirect=True,
            scope="module",
        )


def _approach(info: localcluster.ClusterInfo) -> str:
    return next(a for a in APPROACHES if MODES[a] == info.mode)


def _clean(info: localcluster.ClusterInfo) -> bool:
    """Whether no pod and no ESL's resource is left; the pods a module left (some do not
    delete theirs at the end) are deleted, as its tests are done with them."""
    env = Env(_approach(info), info)
    if env.work.core.list_namespaced_pod("default", limit=1).items:
        env.work.core.delete_collection_namespaced_pod("default", grace_period_seconds=0)
        return False
    if env.approach == "dra" and _claims(env):  # a deleted pod's claim goes after it
        return False
    return not any(env.on_nodes().values())


def _claims(env: Env) -> list[Any]:
    claims: Any = client.CustomObjectsApi(env.work.core.api_client).list_namespaced_custom_object(
        "resource.k8s.io", "v1", "default", "resourceclaims", limit=1
    )
    return list(claims["items"])


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, cluster_pool: Callable[..., localcluster.ClusterInfo]
) -> localcluster.ClusterInfo:
    """The approach's cluster, from the pool."""
    return cluster_pool(dict(request.param), _clean)


@pytest.fixture(scope="module")
def env(cluster: localcluster.ClusterInfo) -> Env:
    return Env(_approach(cluster), cluster)
