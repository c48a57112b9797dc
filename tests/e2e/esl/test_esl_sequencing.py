"""Sequencing end to end, on both approaches: T2 is placed only after T1 finished (here:
was deleted, as the local cluster runs no pods), detected by the ESL's step."""

from __future__ import annotations

import pytest
from esl_harness import Env, wait_stepping

from extender.esl.sequencing import Sequencing, SequencingParams

pytestmark = pytest.mark.e2e


def test_t2_is_placed_only_after_t1_finished(env: Env) -> None:
    esl = Sequencing(env.backend, SequencingParams(name="etl", stages=["t1", "t2"]))
    esl.apply()
    (t2,) = env.pods(esl.requests_for("t2"), 1, prefix="t2-")
    (t1,) = env.pods(esl.requests_for("t1"), 1, prefix="t1-")
    assert env.work.wait([t1], timeout=60)[t1].node
    placed = wait_stepping(env, esl, [t2], timeout=3.0)  # steps see T1 running, not finished
    assert placed[t2].node is None, "T2 placed while T1 runs"
    env.work.delete([t1])
    assert wait_stepping(env, esl, [t2], timeout=60)[t2].node
    assert esl.finished == {"t1"}
    env.torn_down(esl)
