"""The ESLs that change their resources over time, against the simulated cluster (eslsim):
sequencing (a stage opens when the previous one signals or is seen finished) and soft
constraints (the pure approach falls back after a timeout; the extender's prioritize takes
the best alternative at once)."""

from __future__ import annotations

import pytest
from builders import Clock, info
from eslsim import D, Sim

from escher_harness.workload import pod_manifest
from extender.core.pod import MAX_VALUE
from extender.esl.base import NAME_MAX, Dynamic, Signalled
from extender.esl.errors import UnknownKey
from extender.esl.sequencing import Sequencing, SequencingParams
from extender.esl.soft import Soft, SoftParams

# ---- sequencing ----------------------------------------------------------------------------


def test_sequencing_places_the_next_stage_only_after_a_signal() -> None:
    sim = Sim()
    esl = Sequencing(sim.backend, SequencingParams(name="etl", stages=["extract", "load"]))
    assert isinstance(esl, Signalled) and isinstance(esl, Dynamic)
    esl.apply()
    assert sim.place(esl.requests_for("load")) is None
    assert sim.place(esl.requests_for("extract"))
    changes = esl.signal("extract")
    assert [(c.resource, c.why) for c in changes] == [
        (f"{D}/seq-etl-extract", "extract finished"),
        (f"{D}/seq-etl-load", "extract finished"),
    ]
    assert sim.place(esl.requests_for("load"))
    assert esl.resources() == [f"{D}/seq-etl-load"]
    assert esl.signal("extract") == []  # signalled twice: nothing more to do
    with pytest.raises(UnknownKey, match="no key 'transform'"):
        esl.signal("transform")


def test_sequencing_step_signals_a_stage_whose_pods_all_finished() -> None:
    sim = Sim()
    esl = Sequencing(sim.backend, SequencingParams(name="s", stages=["a", "b", "c"], pods=2))
    esl.apply()
    assert esl.step() == []  # nothing ran yet: not finished
    sim.place_all(esl.requests_for("a"), 2)
    assert esl.step() == []  # running
    sim.finish()
    assert esl.step() == []  # one of two still running
    sim.finish()
    assert [c.resource for c in esl.step()] == [f"{D}/seq-s-a", f"{D}/seq-s-b"]
    assert sim.place(esl.requests_for("b")) and sim.place(esl.requests_for("c")) is None
    esl.signal("b")
    esl.signal("c")  # the last stage: removed, nothing opens after it
    assert esl.resources() == [] and sim.ours() == set()


def test_sequencing_stage_capacity_is_its_pods_per_node() -> None:
    sim = Sim(nodes=2, labels={"node-1": {"pool": "etl"}})
    params = SequencingParams(name="s", stages=["a", "b"], pods=2, node_selector={"pool": "etl"})
    esl = Sequencing(sim.backend, params)
    esl.apply()
    assert sim.capacities(f"{D}/seq-s-a") == {"node-1": 2}
    assert sim.place_all(esl.requests_for("a"), 3) == ["node-1", "node-1", None]


# ---- soft constraints ----------------------------------------------------------------------


def soft(sim: Sim, clock: Clock) -> Soft:
    params = SoftParams.model_validate(
        {
            "name": "s",
            "alternatives": [{"node": "node-1"}, {}],
            "timeout_seconds": 5,
            "pods": 2,
        }
    )
    esl = Soft(sim.backend, params, clock=clock)
    esl.apply()
    return esl


def test_soft_pure_falls_back_after_the_timeout() -> None:
    sim, clock = Sim(nodes=3, cpu=2), Clock()
    sim.busy("node-1", 2)  # the first choice is full
    esl = soft(sim, clock)
    assert esl.resources() == [f"{D}/soft-s-0"]  # one alternative at a time
    assert sim.place(esl.requests_for(), cpu="1") is None
    clock.advance(4.9)
    assert esl.step() == []  # not yet
    clock.advance(0.1)
    (change,) = esl.step()
    assert change.why == "2 of 2 pods not placed within 5s: falling back to alternative 1"
    assert change.resource == f"{D}/soft-s-1" and esl.current == 1
    assert sorted(sim.place_all(esl.requests_for(), 2, cpu="1")) == ["node-0", "node-2"]
    clock.advance(60)
    assert esl.step() == []  # the last alternative: nothing after it
    esl.teardown()
    assert sim.ours() == set()


def test_soft_pure_does_not_fall_back_when_placed() -> None:
    sim, clock = Sim(nodes=3), Clock()
    esl = soft(sim, clock)
    assert sim.place_all(esl.requests_for(), 2) == ["node-1", "node-1"]
    clock.advance(60)
    assert esl.step() == [] and esl.current == 0


@pytest.mark.parametrize(
    ("filler", "expect"),
    [pytest.param(0, "node-1", id="first-choice-free"), pytest.param(2, "node-0", id="full")],
)
def test_soft_in_the_extenders_path_takes_the_best_alternative_at_once(
    filler: int, expect: str
) -> None:
    sim, clock = Sim(nodes=3, cpu=2, in_path=True), Clock()
    if filler:
        sim.busy("node-1", filler)
    esl = soft(sim, clock)
    req = esl.requests_for()
    assert req.annotations == {f"{D}/prefer": "soft-s-0,soft-s-1"}
    assert req.limits == {f"{D}/soft-s": "1"}
    # Free: node-1 is preferred though node-0 comes first by spread and name. Full: any
    # node is the next alternative, and node-0 wins the tie with node-2 by name.
    assert sim.place(req, cpu="1") == expect  # no timeout, no resubmission
    clock.advance(60)
    assert esl.step() == []
    esl.teardown()
    assert sim.ours() == set()


def test_soft_in_the_extenders_path_asks_for_the_union_of_alternatives() -> None:
    sim = Sim(nodes=4, labels={"node-2": {"zone": "b"}, "node-3": {"zone": "b"}}, in_path=True)
    params = SoftParams.model_validate(
        {"name": "s", "alternatives": [{"node": "node-0"}, {"node_selector": {"zone": "b"}}]}
    )
    esl = Soft(sim.backend, params)
    esl.apply()
    assert set(sim.capacities(f"{D}/soft-s")) == {"node-0", "node-2", "node-3"}
    assert esl.resources() == [f"{D}/soft-s", f"{D}/soft-s-0", f"{D}/soft-s-1"]


def test_the_longest_prefer_annotation_is_one_the_extender_reads() -> None:
    sim = Sim(nodes=1, in_path=True)
    name = "n" * NAME_MAX
    params = SoftParams.model_validate({"name": name, "alternatives": [{}] * 64})
    req = Soft(sim.backend, params).requests_for()
    prefer = req.annotations[f"{D}/prefer"]
    assert prefer.split(",")[-1] == f"soft-{name}-63"
    pod = info(pod_manifest("p", limits=req.limits, annotations=req.annotations))
    assert pod.marks[f"{D}/prefer"] == prefer and len(prefer) <= MAX_VALUE
