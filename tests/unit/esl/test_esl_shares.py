"""Sharing slots by weight: the max-min fair shares (extender.esl.shares), and the queues and
hierarchical fair-share ESLs built on them, against the simulated cluster (eslsim)."""

from __future__ import annotations

from collections import Counter

import pytest
from eslsim import D, Sim

from extender.esl.errors import UnknownKey
from extender.esl.fairshare import FairShare, FairShareParams
from extender.esl.queues import Queues, QueuesParams
from extender.esl.shares import weighted_shares, within


@pytest.mark.parametrize(
    ("total", "weights", "wants", "expect"),
    [
        pytest.param(3, {"a": 2, "b": 1}, {"a": 9, "b": 9}, {"a": 2, "b": 1}, id="by-weight"),
        pytest.param(3, {"a": 2, "b": 1}, {"a": 0, "b": 9}, {"a": 0, "b": 3}, id="idle-queue"),
        pytest.param(
            6,
            {"a": 1, "b": 1, "c": 1},
            {"a": 1, "b": 9, "c": 9},
            {"a": 1, "b": 3, "c": 2},
            id="sated-then-remainder-by-name",
        ),
        pytest.param(
            4,
            {"a": 1, "b": 1, "c": 1},
            {"a": 9, "b": 9, "c": 9},
            {"a": 2, "b": 1, "c": 1},
            id="largest-remainder",
        ),
        pytest.param(5, {"a": 3, "b": 1}, {"a": 2, "b": 2}, {"a": 2, "b": 2}, id="all-sated"),
        pytest.param(
            4, {"a": 1, "b": 3}, {"a": 9, "b": 9}, {"a": 1, "b": 3}, id="heavier-first-on-ties"
        ),
        pytest.param(0, {"a": 1}, {"a": 9}, {"a": 0}, id="nothing-to-share"),
    ],
)
def test_weighted_shares(
    total: int, weights: dict[str, int], wants: dict[str, int], expect: dict[str, int]
) -> None:
    shares = weighted_shares(total, weights, wants)
    assert shares == expect
    assert sum(shares.values()) <= total
    assert all(shares[q] <= wants.get(q, 0) for q in weights)


@pytest.mark.parametrize(
    ("total", "targets", "used", "expect"),
    [
        pytest.param(4, {"a": 2, "b": 2}, {}, {"a": 2, "b": 2}, id="within-already"),
        pytest.param(4, {"a": 2, "b": 4}, {"b": 1}, {"a": 2, "b": 2}, id="unused-taken-back"),
        # a's 3 running pods keep their units: b's new ones wait until a's finish
        pytest.param(4, {"a": 3, "b": 2}, {"a": 3}, {"a": 3, "b": 1}, id="running-kept"),
        pytest.param(2, {"a": 3, "b": 1}, {"a": 3, "b": 1}, {"a": 3, "b": 1}, id="all-held"),
    ],
)
def test_within_never_drops_below_what_pods_hold(
    total: int, targets: dict[str, int], used: dict[str, int], expect: dict[str, int]
) -> None:
    assert within(total, targets, used) == expect


# ---- queues --------------------------------------------------------------------------------


def test_queues_drain_in_weight_proportion() -> None:
    sim = Sim(nodes=2, cpu=32)
    esl = Queues(sim.backend, QueuesParams(name="jobs", weights={"a": 2, "b": 1}, slots=3))
    esl.apply()
    assert esl.resources() == []  # every queue starts at 0
    assert sim.place(esl.requests_for("a")) is None
    pending = {"a": 6, "b": 6}
    rounds = []
    while any(pending.values()):
        esl.report(pending)
        esl.step()
        placed: Counter[str] = Counter()
        for q in ("a", "b"):
            while pending[q] and sim.place(esl.requests_for(q)):
                pending[q] -= 1
                placed[q] += 1
        rounds.append((placed["a"], placed["b"]))
        sim.finish_all()  # the round's pods finish
    # 2:1 while both wait; once a is drained, b takes every slot
    assert rounds == [(2, 1), (2, 1), (2, 1), (0, 3)]
    esl.teardown()
    assert sim.ours() == set()


def test_queues_never_shrink_below_running_pods() -> None:
    sim = Sim(nodes=2)
    esl = Queues(sim.backend, QueuesParams(name="q", weights={"a": 1, "b": 1}, slots=2))
    esl.report({"a": 2, "b": 0})
    esl.step()
    assert [sim.place(esl.requests_for("a")) is not None for _ in range(3)] == [True, True, False]
    esl.report({"a": 0, "b": 5})
    esl.step()  # b wants everything but a's two pods still run
    assert sim.place(esl.requests_for("b")) is None
    sim.finish()
    changes = esl.step()  # a gives back the finished pod's unit, b takes it
    assert [(c.resource, c.nodes) for c in changes] == [
        (f"{D}/q-q-a", {"node-0": 0}),
        (f"{D}/q-q-b", {"node-0": 1}),
    ]
    assert {c.why for c in changes} == {"weighted fair share"}
    assert sim.place(esl.requests_for("b")) is not None


def test_queues_spread_a_queues_units_over_the_nodes() -> None:
    sim = Sim(nodes=3)
    esl = Queues(sim.backend, QueuesParams(name="q", weights={"a": 1}, slots=5))
    esl.step()
    assert sim.capacities(f"{D}/q-q-a") == {"node-0": 2, "node-1": 2, "node-2": 1}
    assert esl.step() == []  # nothing changed: no churn


@pytest.mark.parametrize(
    "backlog",
    [pytest.param({"c": 1}, id="unknown-queue"), pytest.param({"a": 1, "zz": 2}, id="one-unknown")],
)
def test_a_backlog_of_an_unknown_queue_is_refused(backlog: dict[str, int]) -> None:
    esl = Queues(Sim().backend, QueuesParams(name="q", weights={"a": 1, "b": 1}, slots=2))
    with pytest.raises(UnknownKey) as e:
        esl.report(backlog)
    assert e.value.field == "key" and esl.backlog is None


# ---- fair share ----------------------------------------------------------------------------


def fs_params(slots: int) -> FairShareParams:
    return FairShareParams.model_validate(
        {
            "name": "fs",
            "slots": slots,
            "groups": {
                "research": {"weight": 1, "users": {"ann": 1, "bob": 1}},
                "prod": {"weight": 1, "users": {"cy": 1}},
            },
        }
    )


@pytest.mark.parametrize(
    ("backlog", "expect"),
    [
        pytest.param(
            {"ann": 9, "bob": 9, "cy": 9}, {"ann": 2, "bob": 2, "cy": 4}, id="groups-then-users"
        ),
        pytest.param({"ann": 9, "bob": 9, "cy": 0}, {"ann": 4, "bob": 4, "cy": 0}, id="idle-group"),
        pytest.param({"ann": 9, "bob": 1, "cy": 9}, {"ann": 3, "bob": 1, "cy": 4}, id="idle-user"),
        pytest.param({"ann": 0, "bob": 0, "cy": 3}, {"ann": 0, "bob": 0, "cy": 3}, id="sated"),
    ],
)
def test_fairshare_is_hierarchical(backlog: dict[str, int], expect: dict[str, int]) -> None:
    sim = Sim(nodes=2, cpu=32)
    esl = FairShare(sim.backend, fs_params(8))
    esl.report(backlog)
    esl.step()
    placed = {u: sum(1 for _ in range(9) if sim.place(esl.requests_for(u))) for u in backlog}
    assert placed == expect


def test_fairshare_resizes_as_users_leave() -> None:
    sim = Sim(nodes=2, cpu=32)
    esl = FairShare(sim.backend, fs_params(4))
    assert esl.request_keys() == ["ann", "bob", "cy"]
    esl.step()  # no reports: everybody backlogged
    for u in ("ann", "bob", "cy"):
        while sim.place(esl.requests_for(u)):
            pass
    assert len(sim.where) == 4
    sim.finish_all()
    esl.report({"ann": 5, "bob": 5, "cy": 0})  # prod has nothing left to run
    esl.step()
    assert [sum(1 for _ in range(5) if sim.place(esl.requests_for(u))) for u in ("ann", "bob")] == [
        2,
        2,
    ]
    esl.teardown()
    assert sim.ours() == set()


def test_new_units_go_to_the_least_loaded_node_then_by_name() -> None:
    sim = Sim(nodes=4)
    esl = Queues(sim.backend, QueuesParams(name="q", weights={"a": 1, "b": 1}, slots=6))
    esl.step()
    assert sim.capacities(f"{D}/q-q-a") == {"node-0": 1, "node-1": 1, "node-2": 1}
    assert sim.capacities(f"{D}/q-q-b") == {"node-0": 1, "node-1": 1, "node-3": 1}


def test_with_no_nodes_a_step_changes_nothing() -> None:
    sim = Sim(nodes=0)
    esl = Queues(sim.backend, QueuesParams(name="q", weights={"a": 1}, slots=2))
    assert esl.step() == [] and esl.resources() == []
