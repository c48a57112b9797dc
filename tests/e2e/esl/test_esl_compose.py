"""Composition end to end, on both approaches: co-location AND load balancing places four
groups of two, each group on one node and two pods on every node; anti-affinity of 5 pods
AND co-location on one node is refused as unsatisfiable, leaving nothing on the nodes."""

from __future__ import annotations

import pytest
from esl_harness import Env, nodes_of

from extender.esl.antiaffinity import AntiAffinity, AntiAffinityParams
from extender.esl.base import Unsatisfiable
from extender.esl.colocation import Colocation, ColocationParams
from extender.esl.compose import Compose, ComposeParams
from extender.esl.loadbalance import LoadBalance, LoadBalanceParams

pytestmark = pytest.mark.e2e


def test_colocation_and_load_balancing(env: Env) -> None:
    groups = {"a": 2, "b": 2, "c": 2, "d": 2}
    parts = [
        Colocation(env.backend, ColocationParams(name="svc", groups=groups)),
        LoadBalance(env.backend, LoadBalanceParams(name="svc", tasks=8)),
    ]
    esl = Compose(env.backend, ComposeParams(name="svc", op="and", pods=8), parts)
    esl.apply()
    names = {g: env.pods(esl.requests_for(g), 2, prefix=f"svc-{g}-") for g in groups}
    placed = env.work.wait([n for ns in names.values() for n in ns], timeout=60)
    for g, ns in names.items():
        assert len({placed[n].node for n in ns}) == 1, f"group {g} split: {placed}"
    assert nodes_of(placed) == dict.fromkeys(env.info.nodes, 2)
    env.torn_down(esl)


def test_an_unsatisfiable_composition_is_refused_and_leaves_nothing(env: Env) -> None:
    parts = [
        AntiAffinity(env.backend, AntiAffinityParams(name="spread")),
        Colocation(env.backend, ColocationParams(name="together", groups={"all": 5})),
    ]
    esl = Compose(env.backend, ComposeParams(name="bad", op="and", pods=5), parts)
    with pytest.raises(Unsatisfiable, match="composition bad: group all of 5 members"):
        esl.apply()
    assert not any(rs for rs in env.on_nodes().values())
