"""Planning a gang (extender.gang.plan): a node for every member at once, or none, whatever
order the members and the nodes come in."""

from __future__ import annotations

import itertools

import pytest

from extender.core.constraints import Constraints
from extender.core.ledger import NodeView
from extender.gang.plan import Planned, Unplaced, Want, plan

CPU = "cpu"


def node(name: str, cpu: int, used: int = 0) -> NodeView:
    return NodeView(
        name,
        labels={"kubernetes.io/hostname": name},
        physical={CPU: cpu},
        used={CPU: used},
    )


def on(host: str) -> Constraints:
    return Constraints({"kubernetes.io/hostname": host}, None, (), "")


NODES = [node(f"n{i}", 2000) for i in range(4)]

CASES = {
    # The member pinned to n3 by its node selector must not find n3 filled by the two
    # that could go anywhere, whichever order the nodes are offered and the refs sort in.
    "pinned by selector": (
        [Want("a", {CPU: 1000}, on("n3")), Want("b", {CPU: 1000}), Want("c", {CPU: 1000})],
        NODES,
        {"a": "n3"},
    ),
    # The same with the nodes kube-scheduler found feasible (constraints only it evaluates).
    "pinned by candidates": (
        [
            Want("a", {CPU: 1000}, candidates=frozenset({"n1"})),
            Want("b", {CPU: 1000}),
            Want("c", {CPU: 1000}),
        ],
        [node("n1", 2000), node("n2", 1000)],
        {"a": "n1"},
    ),
    # Two pinned to different nodes, and a large member: all placed.
    "two pins and a large member": (
        [
            Want("p", {CPU: 1000}, on("n0")),
            Want("q", {CPU: 1000}, on("n1")),
            Want("big", {CPU: 2000}),
        ],
        [node("n0", 2000, used=1000), node("n1", 2000, used=1000), node("n2", 2000)],
        {"p": "n0", "q": "n1", "big": "n2"},
    ),
}


@pytest.mark.parametrize(("wants", "nodes", "fixed"), CASES.values(), ids=CASES.keys())
def test_constrained_members_are_placed_first_in_any_order(
    wants: list[Want], nodes: list[NodeView], fixed: dict[str, str]
) -> None:
    for members in itertools.permutations(wants):
        for offered in itertools.permutations(nodes):
            for empty in (False, True):
                result = plan(members, offered, "escher.io/", empty=empty)
                assert isinstance(result, Planned), (members, [v.name for v in offered])
                placed = result.places
                assert placed.items() >= fixed.items()
                for n in nodes:  # no node over its capacity
                    took = sum(w.amounts[CPU] for w in wants if placed[w.ref] == n.name)
                    assert took <= n.physical[CPU] - (0 if empty else n.used[CPU])


def test_a_gang_that_does_not_fit_gets_no_plan() -> None:
    wants = [Want("a", {CPU: 1000}, on("n0")), Want("b", {CPU: 1000}, on("n0"))]
    assert plan(wants, [node("n0", 2000, used=1000), node("n1", 2000)], "escher.io/") == Unplaced(
        "only 1 of 2 member(s) of cpu=1000 fit the nodes they may use"
    )
    # Empty, it could.
    assert plan(wants, [node("n0", 2000, used=1000)], "escher.io/", empty=True) == Planned(
        {"a": "n0", "b": "n0"}
    )
    # A selector no node matches: never.
    assert plan([Want("x", {CPU: 1}, on("gone"))], NODES, "escher.io/", empty=True) == Unplaced(
        "only 0 of 1 member(s) of cpu=1 fit the nodes they may use, even empty"
    )
