"""Weighted fair queueing end to end, on both approaches: two queues of weight 2 and 1 share
3 slots; while both wait they are drained 2:1, and once the heavier one is empty the other
takes every slot. The application reports its backlog and steps the ESL each round."""

from __future__ import annotations

import pytest
from esl_harness import Env, wait_stepping

from extender.esl.queues import Queues, QueuesParams

pytestmark = pytest.mark.e2e


def test_queues_drain_in_weight_proportion(env: Env) -> None:
    esl = Queues(env.backend, QueuesParams(name="jobs", weights={"a": 2, "b": 1}, slots=3))
    esl.apply()
    waiting = {q: env.pods(esl.requests_for(q), 6, prefix=f"{q}-") for q in ("a", "b")}
    rounds = []
    while any(waiting.values()):
        esl.report({q: len(names) for q, names in waiting.items()})
        everyone = [n for names in waiting.values() for n in names]
        want = min(3, len(everyone))
        placed = wait_stepping(env, esl, everyone, timeout=60, bound=want)
        placed = env.work.wait(everyone, timeout=5, bound=want, settle=1.5)  # none beyond
        done = {q: [n for n in names if placed[n].node] for q, names in waiting.items()}
        rounds.append((len(done["a"]), len(done["b"])))
        for q, names in done.items():
            env.work.delete(names)  # this round's pods finish
            waiting[q] = [n for n in waiting[q] if n not in names]
    assert rounds == [(2, 1), (2, 1), (2, 1), (0, 3)]
    env.torn_down(esl)
