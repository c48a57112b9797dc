"""The service's store of ESL instances (extender.esl.registry.Instances), over the simulated
cluster's ledger (eslsim): create validates, applies and leaves nothing behind when any of it
fails; at most `limit` instances (TooMany); steps, signals and deletes go to the instance by
id; the step loop carries on past an instance that fails; `durable` reports the write-back's
confirmation per call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from eslsim import D, Sim

from extender.core.errors import Conflict, UnknownNode
from extender.esl.backends import LedgerBackend
from extender.esl.errors import (
    InstanceExists,
    InstanceNotFound,
    InvalidParameters,
    TooMany,
    UnknownKey,
    UnknownKind,
    Unsatisfiable,
    Unsupported,
)
from extender.esl.registry import Instances

COLOC = {"name": "web", "groups": {"a": 2}}
QUEUES = {"name": "jobs", "weights": {"a": 1, "b": 1}, "slots": 2}
STAGES = {"name": "etl", "stages": ["x", "y"]}


def store(
    sim: Sim, limit: int = 10, wait: Callable[[int, list[str]], bool] | None = None
) -> Instances:
    return Instances(lambda: LedgerBackend(sim.ledger, D, wait=wait, in_path=False), limit=limit)


def test_create_applies_and_names_the_instance_by_kind_and_name() -> None:
    sim = Sim()
    s = store(sim)
    inst = s.create("colocation", COLOC).instance
    assert (inst.id, inst.kind, inst.steps) == ("colocation-web", "colocation", 0)
    assert inst.esl.resources() == [f"{D}/coloc-web-a"] and sim.ours() == {f"{D}/coloc-web-a"}
    assert s.get("colocation-web") is inst and s.all() == [inst] and len(s) == 1
    s.create("colocation", {**COLOC, "name": "api"})
    assert [i.id for i in s.all()] == ["colocation-web", "colocation-api"]


@pytest.mark.parametrize(
    ("kind", "body", "error", "field"),
    [
        pytest.param("nope", {}, UnknownKind, "kind", id="unknown-kind"),
        pytest.param("colocation", {"name": "web"}, InvalidParameters, "groups", id="invalid"),
        pytest.param("colocation", None, InvalidParameters, None, id="no-body"),
        pytest.param(
            "antiaffinity", {"name": "a", "pods": 5}, Unsatisfiable, "pods", id="apply-refused"
        ),
        pytest.param(
            "compose",
            {
                "name": "c",
                "op": "and",
                "pods": 1,
                "parts": [
                    {"kind": "antiaffinity", "params": {"name": "a"}},
                    {"kind": "locality", "params": {"name": "d", "node": "nope"}},
                ],
            },
            UnknownNode,
            "node",
            id="backend-refused",
        ),
    ],
)
def test_a_create_that_fails_leaves_nothing_behind(
    kind: str, body: Any, error: type[Exception], field: str | None
) -> None:
    sim = Sim()
    s = store(sim)
    with pytest.raises(error) as e:
        s.create(kind, body)
    assert getattr(e.value, "field", None) == field
    assert len(s) == 0 and sim.ours() == set()
    s.create("colocation", COLOC)  # and the name stays free
    assert len(s) == 1


def test_an_existing_instance_is_not_created_twice() -> None:
    sim = Sim()
    s = store(sim)
    first = s.create("colocation", COLOC).instance
    with pytest.raises(InstanceExists) as e:
        s.create("colocation", {"name": "web", "groups": {"b": 1}})
    assert e.value.field == "name"
    assert s.all() == [first] and sim.ours() == {f"{D}/coloc-web-a"}


def test_at_most_limit_instances() -> None:
    sim = Sim()
    s = store(sim, limit=2)
    s.create("colocation", COLOC)
    s.create("antiaffinity", {"name": "a"})
    with pytest.raises(TooMany) as e:
        s.create("locality", {"name": "d", "node": "node-1"})
    assert str(e.value) == "the service runs 2 ESL instances, its limit"
    assert len(s) == 2 and f"{D}/data-d" not in sim.ours()
    s.delete("antiaffinity-a")
    s.create("locality", {"name": "d", "node": "node-1"})  # room again
    assert len(s) == 2


@pytest.mark.parametrize(
    ("call", "error", "field"),
    [
        pytest.param(lambda s: s.get("colocation-nope"), InstanceNotFound, "id", id="get"),
        pytest.param(lambda s: s.step("queues-nope"), InstanceNotFound, "id", id="step"),
        pytest.param(lambda s: s.delete("x" * 1000), InstanceNotFound, "id", id="delete"),
        pytest.param(lambda s: s.step("colocation-web"), Unsupported, "id", id="static-step"),
        pytest.param(lambda s: s.signal("queues-jobs", "a"), Unsupported, "id", id="no-signals"),
        pytest.param(
            lambda s: s.step("sequencing-etl", {"x": 1}), InvalidParameters, "backlog", id="backlog"
        ),
        pytest.param(lambda s: s.step("queues-jobs", {"c": 1}), UnknownKey, "key", id="bad-queue"),
        pytest.param(lambda s: s.signal("sequencing-etl", "z"), UnknownKey, "key", id="bad-stage"),
    ],
)
def test_calls_the_instance_cannot_take_are_refused(
    call: Callable[[Instances], object], error: type[Exception], field: str
) -> None:
    s = store(Sim())
    s.create("colocation", COLOC)
    s.create("queues", QUEUES)
    s.create("sequencing", STAGES)
    with pytest.raises(error) as e:
        call(s)
    assert getattr(e.value, "field", None) == field
    assert "x" * 100 not in str(e.value)  # a hostile id is not echoed whole


def test_step_signal_and_delete_go_to_the_instance() -> None:
    sim = Sim()
    s = store(sim)
    s.create("queues", QUEUES)
    inst = s.step("queues-jobs", {"a": 3}).instance
    assert inst.steps == 1
    assert [(c.resource, sum(c.nodes.values())) for c in inst.last_changes] == [
        (f"{D}/q-jobs-a", 2)
    ]
    s.create("sequencing", STAGES)
    inst = s.signal("sequencing-etl", "x").instance
    assert [c.resource for c in inst.last_changes] == [f"{D}/seq-etl-x", f"{D}/seq-etl-y"]
    gone = s.delete("sequencing-etl")
    assert gone.instance is inst and gone.removed == (f"{D}/seq-etl-y",)
    assert sim.ours() == {f"{D}/q-jobs-a"} and [i.id for i in s.all()] == ["queues-jobs"]


def test_the_step_loop_steps_the_dynamic_ones_and_carries_on_past_a_failure() -> None:
    sim = Sim()
    s = store(sim)
    s.create("colocation", COLOC)  # static: not stepped
    broken = s.create("queues", QUEUES).instance
    s.create("loadbalance", {"name": "lb", "mode": "dynamic"})

    def fail() -> list[Any]:
        raise Conflict("below allocated", "capacity")

    broken.esl.step = fail  # type: ignore[method-assign]
    s.step_all()
    assert {i.id: i.steps for i in s.all()} == {
        "colocation-web": 0,
        "queues-jobs": 0,
        "loadbalance-lb": 1,
    }


def test_durable_says_whether_the_write_back_confirmed_each_call() -> None:
    answers: list[bool] = []
    sim = Sim()
    s = store(sim, wait=lambda version, nodes: answers.pop(0))
    answers[:] = [True]
    assert s.create("locality", {"name": "d", "node": "node-1"}).durable and answers == []
    answers[:] = [False]
    anti = s.create("antiaffinity", {"name": "a"})
    assert not anti.durable
    answers[:] = [True]
    gone = s.delete("antiaffinity-a")
    assert gone.instance is anti.instance and gone.removed == (f"{D}/anti-a",)
    assert gone.durable and answers == []  # each call starts afresh


def test_a_call_answers_its_own_durability_whatever_the_step_loop_does_after() -> None:
    """The reply's durability is read under the instance's lock: a step of the service's own
    loop that begins between the change and the reply does not make an unconfirmed change
    look durable (it did, when the HTTP layer read the backend afterwards)."""
    answers: list[bool] = []
    s = store(Sim(), wait=lambda version, nodes: answers.pop(0))
    answers[:] = [False]
    created = s.create("locality", {"name": "d", "node": "node-1"})
    assert answers == []  # the change was waited for, and not confirmed
    created.instance.backend.begin()  # what the step loop does first
    assert created.instance.backend.durable and not created.durable
