"""The benchmark's pure gang runner (escher_harness.bench.puregang) against fakes of the policy
API and of pods: rollback with exponential backoff, the gang's resource removed once
complete, giving up on a gang that can never fit, and ESCHER's placeholder variant (members
created where placeholders landed). Planning itself is the gang ESL's
(tests/unit/esl/test_esl_gang.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from escher_harness.bench.puregang import PLACEHOLDER_LABEL, GangRequest, PureGang
from extender.core.ledger import Ledger
from extender.policies.api import ClusterState, cluster_state

RACK = "topology.kubernetes.io/rack"


def state(racks: Mapping[str, str] | None = None, **nodes: tuple[int, int]) -> ClusterState:
    """nodes: name=(free cpu cores, cpu cores), as a real ledger reports them; memory and
    pods plentiful; `racks`: node -> its rack label."""
    ledger = Ledger()
    for n, (free, cores) in nodes.items():
        labels = {RACK: racks[n]} if racks and n in racks else {}
        ledger.upsert_node(n, labels, {"cpu": cores * 1000, "memory": 1 << 40, "pods": 110})
        ledger.observe_bound(f"busy-{n}", n, {"cpu": (cores - free) * 1000})
    return cluster_state(ledger.snapshot())


class FakePolicy:
    """The PolicyClient calls the runner makes, remembering every resource's capacities."""

    def __init__(self, st: ClusterState) -> None:
        self.st = st
        self.resources: dict[str, dict[str, int]] = {}
        self.history: list[tuple[str, dict[str, int]]] = []

    def cluster_state(self) -> ClusterState:
        return self.st

    def set_resource(self, name: str, capacity: int, *, node: str) -> None:
        self.resources.setdefault(name, {})[node] = capacity
        self.history.append((name, dict(self.resources[name])))

    def delete_resource(self, name: str, force: bool = False) -> None:
        assert force  # members that bound keep their units: the runner forces
        self.resources.pop(name)


class FakePods:
    """Pods: how many of each batch bind, per call of `bound`, and where placeholders land."""

    def __init__(self, binds: list[int], lands: Sequence[str] = ()) -> None:
        self.binds = binds
        self.lands = list(lands)
        self.live: set[str] = set()
        self.created: list[Mapping[str, Any]] = []

    def create(self, manifest: Mapping[str, Any]) -> None:
        self.created.append(manifest)
        self.live.add(manifest["metadata"]["name"])

    def delete(self, names: Sequence[str]) -> None:
        self.live -= set(names)

    def bound(self, names: Sequence[str], timeout: float) -> int:
        return self.binds.pop(0)

    def nodes(self, names: Sequence[str]) -> dict[str, str | None]:
        return dict(zip(names, self.lands, strict=True))


def runner(
    policy: FakePolicy, pods: FakePods, events: list[str], sleeps: list[float], **kw: Any
) -> PureGang:
    return PureGang(
        policy,  # type: ignore[arg-type]
        pods,
        on_event=lambda kind, gang: events.append(kind),
        sleep=sleeps.append,
        **kw,
    )


def limits(manifest: Mapping[str, Any]) -> dict[str, str]:
    return dict(manifest["spec"]["containers"][0]["resources"].get("limits", {}))


def test_rolls_back_with_backoff_then_completes_and_cleans_up() -> None:
    policy, pods = FakePolicy(state(a=(4, 4), b=(4, 4))), FakePods([2, 3, 4])
    events: list[str] = []
    sleeps: list[float] = []
    r = runner(policy, pods, events, sleeps).run(GangRequest("g", 4, backoff=0.5, deadline=60))
    assert (r.completed, r.attempts, r.rollbacks) == (True, 3, 2)
    # Each attempt's members created, the first two rolled back.
    assert events == ["created", "rollback", "created", "rollback", "created"]
    assert sleeps == [0.5, 1.0]  # exponential
    assert policy.history[0] == ("gang-g", {"a": 4})  # the plan: most room first
    assert policy.resources == {}  # the gang's resource is gone once it completed
    assert pods.live == set(r.pods) and len(r.pods) == 4  # only the last attempt's pods
    assert r.pods == ("g-3-0", "g-3-1", "g-3-2", "g-3-3")
    assert limits(pods.created[0]) == {"escher.io/gang-g": "1"}


def test_gives_up_on_a_gang_that_can_never_fit() -> None:
    policy, pods = FakePolicy(state(a=(4, 4))), FakePods([])
    r = runner(policy, pods, [], []).run(GangRequest("big", 5))
    assert not r.completed and r.attempts == 0
    assert r.reason == "gang big can never fit: 5 members of cpu 1, memory 1Gi"
    assert pods.created == [] and policy.resources == {}


def test_gives_up_after_the_deadline() -> None:
    policy, pods = FakePolicy(state(a=(4, 4))), FakePods([0] * 10)
    r = runner(policy, pods, [], []).run(GangRequest("g", 2, backoff=8, deadline=5))
    assert (r.completed, r.attempts, r.rollbacks) == (False, 1, 1)
    assert r.reason == "gang g did not complete within 5s"
    assert pods.live == set() and policy.resources == {}


@pytest.mark.parametrize(
    ("binds", "lands", "deadline", "resource", "rollbacks"),
    [
        pytest.param([3, 3], ["b", "a", "b"], 60, {"a": 1, "b": 2}, 0, id="all-bind"),
        pytest.param([2, 3, 3], ["a", "a", "a"], 60, {"a": 3}, 1, id="retry-a-partial-hold"),
        # the backoff (8 s) would end after the deadline: no second attempt
        pytest.param([2], [], 5, None, 1, id="deadline-before-a-full-hold"),
    ],
)
def test_placeholders_hold_the_room_the_members_then_take(
    binds: list[int],
    lands: list[str],
    deadline: float,
    resource: dict[str, int] | None,
    rollbacks: int,
) -> None:
    holds = len(binds) - (resource is not None)  # a completed gang's last answer: its members
    policy, pods = FakePolicy(state(a=(4, 4), b=(4, 4))), FakePods(binds, lands)
    events: list[str] = []
    gang = GangRequest("g", 3, backoff=8, deadline=deadline)
    r = runner(policy, pods, events, [], placeholders=True).run(gang)
    assert (r.completed, r.rollbacks) == (resource is not None, rollbacks)
    # The members' resource is made where the placeholders landed, and removed once done.
    assert (policy.history[-1][1] if policy.history else None) == resource
    assert policy.resources == {}
    placeholders = [m for m in pods.created if PLACEHOLDER_LABEL in m["metadata"]["labels"]]
    assert len(placeholders) == 3 * holds
    assert all(limits(m) == {} for m in placeholders)  # they hold cpu and memory only
    assert pods.live == set(r.pods)  # every placeholder is gone
    # Members are created only once placeholders hold the whole gang.
    assert events.count("rollback") == rollbacks
    assert events.count("created") == (resource is not None)
    assert events[-1:] == (["created"] if resource is not None else ["rollback"])


RACKS = {"a": "r1", "b": "r1", "c": "r2"}


def test_required_topology_plans_in_one_rack() -> None:
    policy, pods = FakePolicy(state(RACKS, a=(2, 4), b=(2, 4), c=(3, 4))), FakePods([3])
    r = runner(policy, pods, [], []).run(GangRequest("g", 3, required_topology="rack"))
    assert r.completed
    assert policy.history[-1] == ("gang-g", {"c": 3})  # r2: the best fit, not r1's 4


def test_a_gang_no_rack_can_ever_hold_gives_up_naming_the_largest() -> None:
    policy, pods = FakePolicy(state(RACKS, a=(4, 4), b=(4, 4), c=(4, 4))), FakePods([])
    r = runner(policy, pods, [], []).run(GangRequest("big", 9, required_topology=RACK))
    assert not r.completed and r.attempts == 0
    assert (
        r.reason == "gang big can never fit: no rack can ever hold 9 members: the largest "
        "holds 8 (rack r1)"
    )
    assert pods.created == []


def test_placeholders_of_a_required_rack_are_confined_to_it() -> None:
    policy = FakePolicy(state(RACKS, a=(4, 4), b=(4, 4), c=(2, 4)))
    pods = FakePods([3, 3], ["a", "b", "a"])
    req = GangRequest("g", 3, required_topology="rack")
    r = runner(policy, pods, [], [], placeholders=True).run(req)
    assert r.completed
    placeholders = [m for m in pods.created if PLACEHOLDER_LABEL in m["metadata"]["labels"]]
    assert len(placeholders) == 3
    assert all(m["spec"]["nodeSelector"] == {RACK: "r1"} for m in placeholders)
    assert policy.history[-1] == ("gang-g", {"a": 2, "b": 1})


def test_an_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="'shelf' is neither a topology level"):
        runner(FakePolicy(state(a=(4, 4))), FakePods([]), [], []).run(
            GangRequest("g", 1, preferred_topology="shelf")
        )
