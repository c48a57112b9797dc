"""Compositions of ESLs, against the simulated cluster (eslsim): AND merges the parts' request
vectors and refuses what can never hold its pods, leaving nothing behind; OR falls back to the
next part after its timeout. Parts come as instances (Python) or as {kind, params}, built by
extender.esl.registry.build, whose errors name the offending part's field."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from builders import Clock
from eslsim import D, Sim

from extender.core.errors import UnknownNode
from extender.esl.antiaffinity import AntiAffinity, AntiAffinityParams
from extender.esl.base import ESL
from extender.esl.colocation import Colocation, ColocationParams
from extender.esl.compose import Compose, ComposeParams
from extender.esl.errors import InvalidParameters, UnknownKind, Unsatisfiable
from extender.esl.loadbalance import LoadBalance, LoadBalanceParams
from extender.esl.locality import Locality, LocalityParams
from extender.esl.registry import build


def compose(sim: Sim, op: str, pods: int, parts: list[dict[str, Any]], **more: Any) -> ESL:
    data = {"name": "c", "op": op, "pods": pods, "parts": parts, **more}
    return build("compose", data, sim.backend)


def test_and_colocation_with_loadbalance_spreads_the_groups() -> None:
    sim = Sim(nodes=4, cpu=32)
    groups = {"a": 2, "b": 2, "c": 2, "d": 2}
    coloc = Colocation(sim.backend, ColocationParams(name="g", groups=groups))
    lb = LoadBalance(sim.backend, LoadBalanceParams(name="lb", tasks=8))
    esl = Compose(sim.backend, ComposeParams(name="c", op="and", pods=8), [coloc, lb])
    esl.apply()
    assert esl.request_keys() == ["a", "b", "c", "d"]
    assert esl.requests_for("a").limits == {f"{D}/coloc-g-a": "1", f"{D}/lb-lb": "1"}
    placed = {g: {sim.place(esl.requests_for(g)) for _ in range(2)} for g in groups}
    assert all(len(nodes) == 1 for nodes in placed.values())  # co-located
    assert Counter(sim.where.values()) == dict.fromkeys(sim.ledger.node_names(), 2)  # balanced
    assert esl.resources() == sorted([*coloc.resources(), *lb.resources()])
    esl.teardown()
    assert sim.ours() == set()


def test_and_built_from_its_parts_is_what_python_composes() -> None:
    sim = Sim(nodes=4, cpu=32)
    parts = [
        {"kind": "colocation", "params": {"name": "g", "groups": {"a": 2, "b": 2}}},
        {"kind": "loadbalance", "params": {"name": "lb", "tasks": 8}},
    ]
    esl = compose(sim, "and", 4, parts)
    assert isinstance(esl, Compose)
    assert [type(p) for p in esl.parts] == [Colocation, LoadBalance]
    assert all(p.backend is sim.backend for p in esl.parts)  # type: ignore[attr-defined]
    esl.apply()
    assert esl.requests_for("b").limits == {f"{D}/coloc-g-b": "1", f"{D}/lb-lb": "1"}


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        pytest.param(
            [
                {"kind": "antiaffinity", "params": {"name": "a"}},
                {"kind": "colocation", "params": {"name": "g", "groups": {"all": 5}}},
            ],
            "composition c: group all of 5 members (escher.io/anti-a: 1, pods: 1 each) can "
            "never share a node: no node is that large",
            id="colocation-told-the-others-needs",
        ),
        pytest.param(
            [
                {"kind": "antiaffinity", "params": {"name": "a"}},
                {"kind": "locality", "params": {"name": "d", "node": "node-1"}},
            ],
            "composition c: antiaffinity a AND locality d can never hold 5 pods: where every "
            "resource they request exists (escher.io/anti-a: 1, escher.io/data-d: 1), at most "
            "1 fit",
            id="capacity-where-all-exist",
        ),
    ],
)
def test_and_that_can_never_be_satisfied_is_refused_and_leaves_nothing(
    parts: list[dict[str, Any]], message: str
) -> None:
    sim = Sim(nodes=4)
    esl = compose(sim, "and", 5, parts)
    with pytest.raises(Unsatisfiable) as e:
        esl.apply()
    assert str(e.value) == message
    assert sim.ours() == set() and esl.resources() == []


def test_and_refused_by_the_backend_leaves_nothing() -> None:
    sim = Sim(nodes=4)
    parts = [
        {"kind": "antiaffinity", "params": {"name": "a"}},
        {"kind": "locality", "params": {"name": "d", "node": "nope"}},
    ]
    esl = compose(sim, "and", 1, parts)
    with pytest.raises(UnknownNode) as e:
        esl.apply()
    assert e.value.field == "node" and str(e.value).startswith("composition c: ")
    assert sim.ours() == set() and esl.resources() == []


def test_and_steps_its_dynamic_parts() -> None:
    sim = Sim(nodes=4, labels={"node-1": {"pool": "a"}, "node-3": {"pool": "a"}})
    parts = [
        {"kind": "locality", "params": {"name": "d", "node_selector": {"pool": "a"}}},
        {
            "kind": "loadbalance",
            "params": {"name": "lb", "mode": "dynamic", "node_selector": {"pool": "a"}},
        },
    ]
    esl = compose(sim, "and", 2, parts)
    esl.apply()
    assert sim.place_all(esl.requests_for(), 3) == ["node-1", "node-3", None]
    (change,) = esl.step()  # type: ignore[attr-defined]
    assert (change.resource, change.nodes) == (f"{D}/lb-lb", {"node-1": 2, "node-3": 2})
    assert sim.place(esl.requests_for()) in {"node-1", "node-3"}


def test_and_with_fair_share_is_applied_before_its_first_step_creates_the_shares() -> None:
    """Fair share creates its users' resources only when stepped: the check at apply does not
    refuse the composition for them (found by tests/e2e/esl/test_esl_compose_topology.py)."""
    sim = Sim(nodes=2, cpu=8)
    parts = [
        {"kind": "fairshare", "params": {"name": "t", "slots": 4, "groups": {"all": {
            "users": {"alice": 1, "bob": 1}}}}},
        {"kind": "antiaffinity", "params": {"name": "a", "pods": 2}},
    ]  # fmt: skip
    esl = compose(sim, "and", 2, parts)
    esl.apply()
    esl.step()  # type: ignore[attr-defined]
    assert sim.place_all(esl.requests_for("alice"), 3)[:2] != [None, None]
    # The static parts are still judged: no two of a user's pods on a node, two nodes, two
    # users: five pods can never fit.
    never = [*parts[:1], {"kind": "antiaffinity", "params": {"name": "b"}}]
    with pytest.raises(Unsatisfiable, match="at most 4 fit"):
        compose(sim, "and", 5, never).apply()


@pytest.mark.parametrize(
    ("data", "error", "field", "message"),
    [
        pytest.param(
            {"parts": [{"kind": "nope", "params": {}}]},
            InvalidParameters,
            "parts.0.kind",
            "parts.0.kind: 'nope' is not an ESL to compose (colocation, ",
            id="unknown-kind",
        ),
        pytest.param(
            {"parts": [{"kind": "compose", "params": {}}]},
            InvalidParameters,
            "parts.0.kind",
            "parts.0.kind: 'compose' is not an ESL to compose",
            id="nested-composition",
        ),
        pytest.param(
            {"parts": [{"kind": "locality", "params": {"name": "d", "node": "n"}}, {}]},
            InvalidParameters,
            "parts.1.kind",
            "parts.1.kind: Field required",
            id="part-without-kind",
        ),
        pytest.param(
            {
                "parts": [
                    {"kind": "antiaffinity", "params": {"name": "a"}},
                    {"kind": "colocation", "params": {"name": "g", "groups": {}}},
                ]
            },
            InvalidParameters,
            "parts.1.params.groups",
            "parts.1.params.groups: Dictionary should have at least 1 item",
            id="field-of-a-part",
        ),
        pytest.param(
            {"parts": [{"kind": "gang", "params": {"name": "g", "members": 2, "cpu": "x"}}]},
            InvalidParameters,
            "parts.0.params.cpu",
            "parts.0.params.cpu: ",
            id="quantity-of-a-part",
        ),
        pytest.param(
            {"parts": [{"kind": "locality", "params": {"name": "d"}}]},
            InvalidParameters,
            "parts.0.params",
            "parts.0.params: give exactly one of node, node_selector: where the data is",
            id="part-wide-rule",
        ),
        pytest.param(
            {"parts": [{"kind": "locality", "params": {"name": "d", "node": "n"}}]},
            InvalidParameters,
            "parts",
            "parts: a composition needs at least two parts",
            id="one-part",
        ),
        pytest.param(
            {
                "parts": [
                    {"kind": "queues", "params": {"name": "q", "weights": {"a": 1}, "slots": 1}},
                    {"kind": "colocation", "params": {"name": "g", "groups": {"b": 1}}},
                ]
            },
            InvalidParameters,
            "parts",
            "parts: at most one part may be keyed, not queues q, colocation g",
            id="two-keyed-parts",
        ),
        pytest.param(
            {"parts": [{"kind": "locality", "params": "node-1"}]},
            InvalidParameters,
            "parts.0.params",
            "parts.0.params: Input should be a valid dictionary",
            id="params-not-a-mapping",
        ),
    ],
)
def test_bad_compositions_name_the_part(
    data: dict[str, Any], error: type[Exception], field: str, message: str
) -> None:
    sim = Sim()
    with pytest.raises(error) as e:
        build("compose", {"name": "c", "op": "and", "pods": 1, **data}, sim.backend)
    assert getattr(e.value, "field", None) == field
    assert str(e.value).startswith(message)
    assert sim.ours() == set()  # nothing was applied


def test_an_unknown_kind_is_named() -> None:
    with pytest.raises(UnknownKind) as e:
        build("x" * 100, {}, Sim().backend)
    assert e.value.field == "kind"
    assert str(e.value).startswith(f"unknown ESL kind {'x' * 64!r}; one of colocation, ")


def test_a_composition_in_python_needs_its_parts() -> None:
    with pytest.raises(InvalidParameters) as e:
        Compose(Sim().backend, ComposeParams(name="c", op="and", pods=1))
    assert e.value.field == "parts"


def test_or_falls_back_to_the_next_part_after_the_timeout() -> None:
    sim, clock = Sim(nodes=3), Clock()
    first = Locality(sim.backend, LocalityParams(name="near", node="node-0", slots=1))
    second = AntiAffinity(sim.backend, AntiAffinityParams(name="any"))
    params = ComposeParams(name="c", op="or", pods=2, timeout_seconds=5)
    esl = Compose(sim.backend, params, [first, second], clock=clock)
    esl.apply()
    assert sim.place_all(esl.requests_for(), 2) == ["node-0", None]
    clock.advance(4.9)
    assert esl.step() == []
    clock.advance(0.1)
    (change,) = esl.step()
    assert change.resource == f"{D}/anti-any"
    assert change.why == "1 pods not placed within 5s: falling back to antiaffinity any"
    assert sim.place(esl.requests_for()) in {"node-1", "node-2"}
    clock.advance(60)
    assert esl.step() == []  # the last part: nothing after it
    esl.teardown()
    assert sim.ours() == set()


def test_or_does_not_fall_back_once_its_pods_are_placed() -> None:
    sim, clock = Sim(nodes=3), Clock()
    parts = [
        {"kind": "locality", "params": {"name": "near", "node": "node-0"}},
        {"kind": "antiaffinity", "params": {"name": "any"}},
    ]
    esl = build(
        "compose",
        {"name": "c", "op": "or", "pods": 2, "parts": parts, "timeout_seconds": 5},
        sim.backend,
    )
    assert isinstance(esl, Compose)
    esl.clock = clock
    esl.apply()
    assert sim.place_all(esl.requests_for(), 2) == ["node-0", "node-0"]
    clock.advance(60)
    assert esl.step() == [] and esl.current == 0
