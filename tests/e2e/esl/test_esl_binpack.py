"""Bin-packing end to end, on both approaches: 5 pods of 2 cpu on nodes of 4 cpu use the
fewest nodes (3). The extender packs at placement (the pack score); the pure approach grows
its set of nodes one at a time as the application steps it."""

from __future__ import annotations

import pytest
from esl_harness import Env, nodes_of, wait_stepping

from extender.esl.binpack import BinPack, BinPackParams

pytestmark = pytest.mark.e2e


def test_binpacking_uses_the_fewest_nodes(env: Env) -> None:
    esl = BinPack(env.backend, BinPackParams(name="batch", cpu="2"))
    esl.apply()
    names = env.pods(esl.requests_for(), 5)
    placed = wait_stepping(env, esl, names, timeout=60)
    counts = nodes_of(placed)
    assert sum(counts.values()) == 5 and sorted(counts.values()) == [1, 2, 2], counts
    env.work.delete(names)
    env.torn_down(esl)
