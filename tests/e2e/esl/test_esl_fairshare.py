"""Hierarchical fair sharing end to end, on both approaches: 4 slots shared equally by two
groups, then equally by the users of a group (2 for cy alone, 1 each for ann and bob);
when cy's group has nothing left, ann and bob get 2 each."""

from __future__ import annotations

import pytest
from esl_harness import Env, wait_stepping

from extender.esl.fairshare import FairShare, FairShareParams

pytestmark = pytest.mark.e2e


def test_fair_share_proportions(env: Env) -> None:
    params = FairShareParams.model_validate(
        {
            "name": "lab",
            "slots": 4,
            "groups": {
                "research": {"users": {"ann": 1, "bob": 1}},
                "prod": {"users": {"cy": 1}},
            },
        }
    )
    esl = FairShare(env.backend, params)
    esl.apply()
    pods = {u: env.pods(esl.requests_for(u), 4, prefix=f"{u}-") for u in ("ann", "bob", "cy")}

    def running() -> dict[str, int]:
        everyone = [n for names in pods.values() for n in names]
        wait_stepping(env, esl, everyone, timeout=60, bound=4)
        placed = env.work.wait(everyone, timeout=5, bound=4, settle=1.5)
        return {u: sum(1 for n in names if placed[n].node) for u, names in pods.items()}

    assert running() == {"ann": 1, "bob": 1, "cy": 2}
    env.work.delete(pods.pop("cy"))  # prod's work is done
    first = env.work.placements([n for names in pods.values() for n in names])
    for u, names in pods.items():  # the pods that ran finish too; the rest still wait
        env.work.delete([n for n in names if first[n].node])
        pods[u] = [n for n in names if not first[n].node]
    esl.report({"ann": 3, "bob": 3, "cy": 0})
    assert running() == {"ann": 2, "bob": 2}
    env.torn_down(esl)
