"""The ESL end-to-end tests' `env`: each test module runs once per approach, on the e2e
tier's module cluster (tests/e2e/conftest.py) in the approach's mode, 4 nodes of 4 cpu."""

from __future__ import annotations

import pytest
from builders import cluster_of
from esl_harness import APPROACHES, MODES, Env

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


@pytest.fixture(scope="module")
def env(cluster: localcluster.ClusterInfo) -> Env:
    approach = next(a for a in APPROACHES if MODES[a] == cluster.mode)
    return Env(approach, cluster)
