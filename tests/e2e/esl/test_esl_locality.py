"""Data locality end to end, on both approaches: the pods land on the node holding the
data (ESCHER's two-line policy)."""

from __future__ import annotations

import pytest
from esl_harness import Env, nodes_of

from extender.esl.locality import Locality, LocalityParams

pytestmark = pytest.mark.e2e


def test_data_local_pods_run_on_the_data_node(env: Env) -> None:
    esl = Locality(env.backend, LocalityParams(name="shard7", node="node-2"))
    esl.apply()
    names = env.pods(esl.requests_for(), 4)
    assert nodes_of(env.work.wait(names, timeout=60)) == {"node-2": 4}
    env.torn_down(esl)
