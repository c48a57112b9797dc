"""Domain selection for the pure approach's gangs (extender.esl.domains): a required level puts
every member in one domain, the best fit, and nodes without its label are unusable; a
preferred level spans the fewest domains (checked against brute force), then any nodes; a
gang that cannot fit says which level and which domain is the largest."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.esl.domains import fewest, place
from extender.gang.topology import Level
from extender.policies.api import ClusterState, Usage

RACK = Level("rack", "topology.kubernetes.io/rack")
ZONE = Level("zone", "topology.kubernetes.io/zone")
NEED = {"cpu": 1000, "pods": 1}


def state(nodes: Mapping[str, tuple[int, int, str | None]], zone: str = "z") -> ClusterState:
    """nodes: name=(free cores, cores, rack or None for no label); every node in `zone`."""
    return ClusterState(
        version=1,
        nodes={
            n: {
                "cpu": Usage(capacity=c * 1000, allocated=(c - a) * 1000, available=a * 1000),
                "pods": Usage(capacity=110, allocated=0, available=110),
            }
            for n, (a, c, _) in nodes.items()
        },
        labels={
            n: {ZONE.key: zone, **({RACK.key: r} if r is not None else {})}
            for n, (_, _, r) in nodes.items()
        },
    )


# Racks r1 (2 nodes, 6 free of 8), r2 (1 node, 3 free of 4), r3 (1 node, 4 free of 4) and an
# unlabelled node of 8 free.
CLUSTER = {
    "a": (4, 4, "r1"),
    "b": (2, 4, "r1"),
    "c": (3, 4, "r2"),
    "d": (4, 4, "r3"),
    "x": (8, 8, None),
}


@pytest.mark.parametrize(
    ("members", "use", "required", "preferred", "placed", "why"),
    [
        pytest.param(3, "available", RACK, None, {"c": 3}, "", id="required-best-fit"),
        pytest.param(4, "available", RACK, None, {"d": 4}, "", id="required-best-fit-4"),
        pytest.param(5, "available", RACK, None, {"a": 4, "b": 1}, "", id="required-largest"),
        pytest.param(
            7,
            "available",
            RACK,
            None,
            {},
            "no rack has room for 7 members now: the most is 6 (rack r1)",
            id="required-no-room-now",
        ),
        pytest.param(8, "capacity", RACK, None, {"a": 4, "b": 4}, "", id="required-ever"),
        pytest.param(
            9,
            "capacity",
            RACK,
            None,
            {},
            "no rack can ever hold 9 members: the largest holds 8 (rack r1)",
            id="required-never",
        ),
        pytest.param(
            1,
            "available",
            Level("shelf", "example.com/shelf"),
            None,
            {},
            "no node has the shelf label example.com/shelf",
            id="required-unlabelled",
        ),
        pytest.param(2, "available", None, RACK, {"c": 2}, "", id="preferred-one-smallest"),
        pytest.param(7, "available", None, RACK, {"a": 4, "b": 2, "c": 1}, "", id="preferred-two"),
        pytest.param(
            9, "available", None, RACK, {"a": 4, "b": 2, "c": 3}, "", id="preferred-swap-last"
        ),
        pytest.param(
            14,
            "available",
            None,
            RACK,
            {"x": 8, "a": 4, "d": 2},
            "",
            id="preferred-best-effort-unlabelled",
        ),
        pytest.param(3, "available", ZONE, RACK, {"c": 3}, "", id="required-and-preferred"),
        pytest.param(3, "available", None, None, {"x": 3}, "", id="no-level"),
    ],
)
def test_place(
    members: int,
    use: str,
    required: Level | None,
    preferred: Level | None,
    placed: dict[str, int],
    why: str,
) -> None:
    fit = place(state(CLUSTER), members, NEED, use, required, preferred)
    assert (fit.placed, fit.why) == (placed, why)
    assert fit.field == ("required_topology" if why else "members")


def test_within_keeps_the_domain_members_hold() -> None:
    s = state(CLUSTER)
    assert place(s, 2, NEED, "available", RACK, within={"r1"}).placed == {"a": 2}
    fit = place(s, 7, NEED, "available", RACK, within={"r1"})
    assert fit.why == "no rack has room for 7 members now: the most is 6 (rack r1)"
    fit = place(s, 1, NEED, "available", RACK, within={"r9"})
    assert fit.why == "no node is left in rack r9"


def brute_fewest(room: Mapping[str, int], members: int) -> int | None:
    """The fewest domains whose room covers `members`, by trying every subset."""
    for k in range(len(room) + 1):
        for combo in itertools.combinations(room, k):
            if sum(room[d] for d in combo) >= members:
                return k
    return None


@given(
    st.dictionaries(st.sampled_from("abcdefg"), st.integers(0, 9), max_size=7),
    st.integers(1, 40),
)
def test_fewest_uses_as_few_domains_as_brute_force(room: dict[str, int], members: int) -> None:
    share = fewest(room, members)
    best = brute_fewest(room, members)
    if best is None:
        assert share == {}
        return
    assert len(share) == best
    assert sum(share.values()) == members
    assert all(0 < k <= room[d] for d, k in share.items())
    # The last domain is the smallest that holds what the others leave.
    *full, (last, rest) = sorted(share.items(), key=lambda kv: (-kv[1], kv[0]))
    taken = {d for d, _ in full} | {last}
    assert all(room[e] < rest or room[e] >= room[last] for e in room if e not in taken)
