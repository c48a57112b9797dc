"""Gang scheduling over the ledger: declarations, all-or-nothing reservation, no deadlock,
expiry, the bind barrier, restore after a restart, and other pods kept off reserved places."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from extender.filters import DEFAULT_FILTERS, DEFAULT_SCORERS, REGISTRY, PluginContext
from extender.filters.base import PodInfo
from extender.gang import GangBook, InvalidGang, Keys, Phase, Wake, gang_of
from extender.ledger import HolderKind, Ledger
from extender.verbs import Verbs
from extender.wire import ExtenderArgs, ExtenderBindingArgs

KEYS = Keys.for_domain("escher.io")
NODES = ["n0", "n1", "n2"]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Binder:
    def __init__(self) -> None:
        self.bound: list[tuple[str, str]] = []

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        raise LookupError(name)

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        self.bound.append((name, node))


class World:
    """A ledger of 3 nodes with 4 cpu each, a GangBook, and Verbs wired like the service."""

    def __init__(self, cpu: int = 4000) -> None:
        self.clock = Clock()
        self.ledger = Ledger("escher.io")
        for n in NODES:
            self.ledger.upsert_node(n, {}, {"cpu": cpu, "pods": 110})
        self.gangs = GangBook(self.ledger, KEYS, clock=self.clock)
        self.wakes: list[Wake] = []
        ctx = PluginContext(self.gangs, self.wakes.extend)
        self.binder = Binder()
        self.verbs = Verbs(
            self.ledger,
            "escher.io",
            [REGISTRY[n](ctx) for n in DEFAULT_FILTERS],  # type: ignore[misc]
            [REGISTRY[n](ctx) for n in DEFAULT_SCORERS],  # type: ignore[misc]
            self.binder,
            gangs=self.gangs,
            gang_wait_seconds=0.5,
        )

    def filter(
        self, pod: dict[str, Any], nodes: list[str] = NODES
    ) -> tuple[list[str], dict[str, str]]:
        r = self.verbs.filter(ExtenderArgs(Pod=pod, NodeNames=nodes))
        return r.NodeNames or [], {**r.FailedNodes, **r.FailedAndUnresolvableNodes}

    def bind(self, pod: dict[str, Any], node: str) -> str:
        m = pod["metadata"]
        args = ExtenderBindingArgs(PodName=m["name"], PodNamespace="ns", PodUID=m["uid"], Node=node)
        return asyncio.run(self.verbs.bind(args)).Error


def member(gang: str, i: int, min_members: int = 3, cpu: str = "2", **extra: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{gang}-{i}",
            "namespace": "ns",
            "uid": f"{gang}-uid-{i}",
            "labels": {"escher.io/gang": gang},
            "annotations": {"escher.io/gang-min": str(min_members), **extra},
        },
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
    }


def plain(name: str, cpu: str = "1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
    }


def info(pod: dict[str, Any]) -> PodInfo:
    return World().verbs.pod_info(pod)


@pytest.mark.parametrize(
    ("labels", "annotations", "expected"),
    [
        ({}, {}, None),
        ({"escher.io/gang": "g"}, {"escher.io/gang-min": "4"}, ("g", 4, 60.0)),
        (
            {"scheduling.x-k8s.io/pod-group": "pg"},
            {"escher.io/gang-min": "2", "escher.io/gang-timeout": "5"},
            ("pg", 2, 5.0),
        ),
        ({"escher.io/gang": "g"}, {}, "has no escher.io/gang-min"),
        ({"escher.io/gang": "g"}, {"escher.io/gang-min": "x"}, "non-numeric"),
        ({"escher.io/gang": "g"}, {"escher.io/gang-min": "0"}, "must be >= 1"),
    ],
)
def test_declarations(labels: dict[str, str], annotations: dict[str, str], expected: Any) -> None:
    pod = info(
        {
            "metadata": {
                "name": "p",
                "namespace": "ns",
                "uid": "u",
                "labels": labels,
                "annotations": annotations,
            },
            "spec": {"containers": []},
        }
    )
    if isinstance(expected, str):
        with pytest.raises(InvalidGang, match=expected) as e:
            gang_of(pod, KEYS)
        assert "gang ns/" in str(e.value)  # the message names the gang
        return
    spec = gang_of(pod, KEYS)
    if expected is None:
        assert spec is None
    else:
        assert spec is not None and (spec.name, spec.min_members, spec.timeout) == expected


def test_early_members_wait_holding_nothing() -> None:
    w = World()
    for i in range(2):
        passed, failed = w.filter(member("g", i))
        assert passed == []
        assert set(failed.values()) == {f"gang ns/g waiting for members: {i + 1} of 3 seen"}
    assert w.ledger.reservations == 0 and w.wakes == []


def test_last_member_reserves_the_whole_gang_and_wakes_the_others() -> None:
    w = World()
    pods = [member("g", i) for i in range(3)]
    w.filter(pods[0])
    w.filter(pods[1])
    passed, _ = w.filter(pods[2])
    g = w.gangs.gang("ns/g")
    assert g is not None and g.phase is Phase.RESERVED
    assert w.ledger.reservations == 3
    assert passed == [g.reserved["g-uid-2"]]
    assert sorted(x.name for x in w.wakes) == ["g-0", "g-1", "g-2"]
    # each member now passes exactly its reserved node
    for i, p in enumerate(pods):
        passed, failed = w.filter(p)
        assert passed == [g.reserved[f"g-uid-{i}"]]
        assert len(failed) == 2
    # 3 members of 2 cpu on nodes of 4 cpu: never more than 2 per node
    per_node = [list(g.reserved.values()).count(n) for n in NODES]
    assert max(per_node) <= 2


def test_reservations_keep_ordinary_pods_off_reserved_cpu() -> None:
    w = World()
    for i in range(3):
        w.filter(member("g", i, cpu="4"))  # fills all three nodes
    passed, failed = w.filter(plain("other", cpu="1"))
    assert passed == []
    assert set(failed.values()) == {"cpu on this node is reserved for a gang"}


def test_two_gangs_that_cannot_both_fit_do_not_deadlock() -> None:
    w = World()
    a = [member("a", i, min_members=3, cpu="3") for i in range(3)]
    b = [member("b", i, min_members=3, cpu="3") for i in range(3)]
    for x, y in zip(a, b, strict=True):  # interleaved arrivals
        w.filter(x)
        w.filter(y)
    ga, gb = w.gangs.gang("ns/a"), w.gangs.gang("ns/b")
    assert ga is not None and gb is not None
    assert ga.phase is Phase.RESERVED and gb.phase is Phase.WAITING
    assert gb.reason == "gang ns/b (min 3) does not fit now"
    assert all(h.owner == "ns/a" for h in w.ledger.snapshot().holdings.values())
    # gang a binds; the extender barrier lets all three through together
    results = asyncio.run(_bind_all(w, a, ga.reserved))
    assert results == ["", "", ""]
    assert ga.phase is Phase.COMPLETE
    assert sorted(n for n, _ in w.binder.bound) == ["a-0", "a-1", "a-2"]
    # a finishes: its pods go away; b can now reserve
    for i in range(3):
        w.ledger.release(f"a-uid-{i}")
    w.filter(b[0])
    assert gb.phase is Phase.RESERVED


async def _bind_all(w: World, pods: list[dict[str, Any]], reserved: dict[str, str]) -> list[str]:
    async def one(p: dict[str, Any]) -> str:
        m = p["metadata"]
        args = ExtenderBindingArgs(
            PodName=m["name"], PodNamespace="ns", PodUID=m["uid"], Node=reserved[m["uid"]]
        )
        return (await w.verbs.bind(args)).Error

    return list(await asyncio.gather(*(one(p) for p in pods)))


def test_bind_barrier_holds_members_until_all_arrive() -> None:
    w = World()
    pods = [member("g", i) for i in range(3)]
    for p in pods:
        w.filter(p)
    g = w.gangs.gang("ns/g")
    assert g is not None
    # only two members reach bind: they wait, time out, and nothing is bound
    err = asyncio.run(_bind_all(w, pods[:2], g.reserved))
    assert all("not every member reached bind" in e for e in err)
    assert w.binder.bound == []
    assert w.ledger.reservations == 3  # their places went back to the reservation


def test_a_gang_that_can_never_fit_is_unresolvable() -> None:
    w = World()
    for i in range(3):
        passed, failed = w.filter(member("big", i, cpu="5"))
    assert passed == []
    reason = (
        "gang ns/big can never fit: 3 members of cpu=5000, pods=1 exceed what the cluster's "
        "nodes hold"
    )
    assert set(failed.values()) == {reason}
    r = w.verbs.filter(ExtenderArgs(Pod=member("big", 0, cpu="5"), NodeNames=NODES))
    assert set(r.FailedAndUnresolvableNodes) == set(NODES)


def test_members_that_disagree_on_size_are_rejected_naming_the_gang() -> None:
    w = World()
    w.filter(member("g", 0, min_members=3))
    passed, failed = w.filter(member("g", 1, min_members=4))
    assert passed == []
    assert set(failed.values()) == {
        "gang ns/g: members disagree on its size: pod g-1 says min 4, g-0 said 3"
    }


def test_expired_reservations_are_released() -> None:
    w = World()
    pods = [member("g", i, **{"escher.io/gang-timeout": "5"}) for i in range(3)]
    for p in pods:
        w.filter(p)
    assert w.ledger.reservations == 3
    w.clock.now += 4
    assert w.gangs.expire() == []
    w.clock.now += 2
    wakes = w.gangs.expire()
    assert sorted(x.name for x in wakes) == ["g-0", "g-1", "g-2"]
    assert all(x.node is None for x in wakes)  # un-annotate
    g = w.gangs.gang("ns/g")
    assert g is not None and g.phase is Phase.WAITING and g.timeouts == 1
    assert w.ledger.reservations == 0


def test_restore_from_annotations() -> None:
    w = World()
    pods = [member("g", i) for i in range(3)]
    for p in pods:
        w.filter(p)
    g = w.gangs.gang("ns/g")
    assert g is not None
    reserved, until = dict(g.reserved), g.expires
    # a new extender: fresh ledger and book, members' annotations as written by the wakes
    fresh = World()
    for p in pods:
        pi = fresh.verbs.pod_info(p)
        spec = gang_of(pi, KEYS)
        assert spec is not None
        fresh.gangs.restore(pi, spec, reserved[pi.uid], until)
    restored = fresh.gangs.gang("ns/g")
    assert restored is not None and restored.phase is Phase.RESERVED
    assert restored.reserved == reserved
    kinds = {h.kind for h in fresh.ledger.snapshot().holdings.values()}
    assert kinds == {HolderKind.RESERVATION}
