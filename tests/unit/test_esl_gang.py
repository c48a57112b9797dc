"""The pure gang ESL against fakes: planning from the cluster state, rollback and backoff,
clean-up of its resource, and giving up on a gang that can never fit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from escher_harness.bench.puregang import GangRequest, PureGang, plan
from extender.policy import ClusterState, Usage


def state(**nodes: tuple[int, int]) -> ClusterState:
    """nodes: name=(available cpu cores, capacity cpu cores); memory and pods plentiful."""
    return ClusterState(
        version=1,
        nodes={
            n: {
                "cpu": Usage(capacity=c * 1000, allocated=(c - a) * 1000, available=a * 1000),
                "memory": Usage(capacity=1 << 40, allocated=0, available=1 << 40),
                "pods": Usage(capacity=110, allocated=0, available=110),
            }
            for n, (a, c) in nodes.items()
        },
    )


NEED = {"cpu": 1000, "memory": 1 << 30, "pods": 1}


@pytest.mark.parametrize(
    ("nodes", "members", "use", "expected"),
    [
        ({"a": (4, 4), "b": (2, 4)}, 5, "available", {"a": 4, "b": 1}),
        ({"a": (4, 4), "b": (2, 4)}, 7, "available", {}),
        ({"a": (4, 4), "b": (2, 4)}, 7, "capacity", {"a": 4, "b": 3}),
        ({"a": (0, 4)}, 1, "available", {}),
    ],
)
def test_plan(
    nodes: dict[str, tuple[int, int]], members: int, use: str, expected: dict[str, int]
) -> None:
    assert plan(state(**nodes), members, NEED, use) == expected


class FakePolicy:
    def __init__(self, st: ClusterState) -> None:
        self.st = st
        self.resources: dict[str, dict[str, int]] = {}

    def cluster_state(self) -> ClusterState:
        return self.st

    def set_resource(self, name: str, capacity: int, *, node: str) -> None:
        self.resources.setdefault(name, {})[node] = capacity

    def delete_resource(self, name: str) -> None:
        self.resources.pop(name)


class FakePods:
    def __init__(self, binds: list[int]) -> None:
        self.binds = binds  # how many members bind, per attempt
        self.live: set[str] = set()
        self.created: list[Mapping[str, Any]] = []

    def create(self, manifest: Mapping[str, Any]) -> None:
        self.created.append(manifest)
        self.live.add(manifest["metadata"]["name"])

    def delete(self, names: Sequence[str]) -> None:
        self.live -= set(names)

    def bound(self, names: Sequence[str], timeout: float) -> int:
        return self.binds.pop(0)


def esl(policy: FakePolicy, pods: FakePods, events: list[str], sleeps: list[float]) -> PureGang:
    return PureGang(
        policy,  # type: ignore[arg-type]
        pods,
        on_event=lambda kind, gang: events.append(kind),
        sleep=sleeps.append,
    )


def test_rolls_back_with_backoff_then_completes_and_cleans_up() -> None:
    policy, pods = FakePolicy(state(a=(4, 4), b=(4, 4))), FakePods([2, 3, 4])
    events: list[str] = []
    sleeps: list[float] = []
    r = esl(policy, pods, events, sleeps).run(GangRequest("g", 4, backoff=0.5, deadline=60))
    assert (r.completed, r.attempts, r.rollbacks) == (True, 3, 2)
    assert events == ["rollback", "rollback"]
    assert sleeps == [0.5, 1.0]  # exponential
    assert policy.resources == {}  # the gang's resource is gone once it completed
    assert pods.live == set(r.pods) and len(r.pods) == 4  # only the last attempt's pods
    limits = pods.created[0]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"escher.io/gang-g": "1"}


def test_gives_up_on_a_gang_that_can_never_fit() -> None:
    policy, pods = FakePolicy(state(a=(4, 4))), FakePods([])
    r = esl(policy, pods, [], []).run(GangRequest("big", 5))
    assert not r.completed and r.attempts == 0
    assert r.reason == "gang big can never fit: 5 members of cpu 1, memory 1Gi"
    assert pods.created == [] and policy.resources == {}
