"""Load balancing end to end, on both approaches: static (ceil(tasks/nodes) per node) and
dynamic (one per node, one more everywhere once all are used, stepped by the application):
the spread is within one pod of even."""

from __future__ import annotations

import pytest
from esl_harness import Env, nodes_of, wait_stepping

from extender.esl.loadbalance import LoadBalance, LoadBalanceParams

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    ("params", "pods"),
    [({"mode": "static", "tasks": 8}, 8), ({"mode": "dynamic"}, 6)],
)
def test_load_is_spread_within_one_pod_of_even(
    env: Env, params: dict[str, object], pods: int
) -> None:
    esl = LoadBalance(env.backend, LoadBalanceParams(name=str(params["mode"]), **params))  # type: ignore[arg-type]
    esl.apply()
    names = env.pods(esl.requests_for(), pods)
    placed = wait_stepping(env, esl, names, timeout=60)
    counts = [nodes_of(placed).get(n, 0) for n in env.info.nodes]
    assert sum(counts) == pods and max(counts) - min(counts) <= 1, counts
    env.work.delete(names)
    env.torn_down(esl)
