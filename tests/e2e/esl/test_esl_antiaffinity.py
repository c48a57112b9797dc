"""Anti-affinity end to end, on every approach: no two of the pods on one node; the pod
beyond the nodes stays pending, saying which resource it lacks (in mode dra, kube-scheduler
says only that it cannot allocate the pod's claims: it names no resource)."""

from __future__ import annotations

import pytest
from esl_harness import Env, nodes_of

from extender.esl.antiaffinity import AntiAffinity, AntiAffinityParams

pytestmark = pytest.mark.e2e


def test_no_two_antiaffine_pods_share_a_node(env: Env) -> None:
    esl = AntiAffinity(env.backend, AntiAffinityParams(name="replicas"))
    esl.apply()
    names = env.pods(esl.requests_for(), 5)
    placed = env.work.wait(names, timeout=60, bound=4, settle=3.0)
    assert nodes_of(placed) == dict.fromkeys(env.info.nodes, 1)
    (pending,) = [p for p in placed.values() if not p.node]
    lacks = "cannot allocate all claims" if env.approach == "dra" else esl.resources()[0]
    assert lacks in pending.reason, pending.reason
    env.torn_down(esl)
