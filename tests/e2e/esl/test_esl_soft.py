"""Soft constraints end to end, on both approaches: pods go to the first alternative when
it has room; when it has none, they fall back: on the extender at once (the preference is a
prioritize score), on the pure approach only after the timeout, resubmitted."""

from __future__ import annotations

import time

import pytest
from esl_harness import Env

from extender.esl.soft import Soft, SoftParams

pytestmark = pytest.mark.e2e

TIMEOUT = 4.0


def soft(env: Env, name: str) -> Soft:
    params = SoftParams.model_validate(
        {
            "name": name,
            "alternatives": [{"node": "node-1"}, {}],
            "timeout_seconds": TIMEOUT,
            "pods": 2,
        }
    )
    esl = Soft(env.backend, params)
    esl.apply()
    return esl


def place(env: Env, esl: Soft, n: int) -> tuple[dict[str, str | None], float]:
    """Create n pods and drive them as an application does: step, and resubmit the pending
    ones when the ESL falls back. Where each ended up, and how long it took."""
    start = time.monotonic()
    names = env.pods(esl.requests_for(), n, cpu="1")
    while time.monotonic() - start < 60:
        placed = env.work.placements(names)
        if all(p.node for p in placed.values()):
            return {n: p.node for n, p in placed.items()}, time.monotonic() - start
        if esl.step():
            pending = [n for n, p in placed.items() if not p.node]
            env.work.delete(pending)
            names = [n for n in names if n not in pending]
            names += env.pods(esl.requests_for(), len(pending), cpu="1")
        time.sleep(0.2)
    raise AssertionError(f"not placed: {env.work.placements(names)}")


def test_the_first_alternative_when_it_has_room(env: Env) -> None:
    esl = soft(env, "roomy")
    where, _ = place(env, esl, 2)
    assert set(where.values()) == {"node-1"}
    env.work.delete(list(where))
    env.torn_down(esl)


def test_the_fallback_when_it_has_none(env: Env) -> None:
    filler = env.filler("node-1", "4")  # the first choice is full
    esl = soft(env, "full")
    where, seconds = place(env, esl, 2)
    assert "node-1" not in where.values()
    if env.approach == "extender":
        assert seconds < TIMEOUT, seconds  # at once: no timeout, no resubmission
    else:
        assert seconds >= TIMEOUT and esl.current == 1, seconds
    env.work.delete([*where, filler])
    env.torn_down(esl)
