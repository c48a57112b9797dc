"""The preference nominations' decisions over a real ledger: which node each pending pod
stating a preference is nominated for, counting what is nominated already against each
node's room (a burst fills a node and moves on), and what ends a nomination (the pod bound
or gone, kube-scheduler clearing it) or makes none (no node satisfies the preference, a gang
member, a held pod, a follower, the bound on pods tracked)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgspec
import pytest
from builders import KEYS, PREFIX, info, pod

from extender.core.events import PodChange, PodEvent
from extender.core.ledger import Ledger
from extender.core.pod import PodInfo
from extender.preference.args import PreferenceArgs
from extender.preference.nominations import Nominations

R = PREFIX + "gpu"
NODES = ("n1", "n2", "n3")


def ledger(cpu: int = 4000, gpu: Mapping[str, int] | None = None) -> Ledger:
    lg = Ledger()
    for n in NODES:
        lg.upsert_node(n, {"zone": "a" if n == "n3" else "b"}, {"cpu": cpu, "pods": 110})
    lg.set_capacity(R, dict(gpu if gpu is not None else dict.fromkeys(NODES, 2)))
    return lg


class Written:
    """The writer: records (pod, node) and keeps each `wanted` to ask later."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.wanted: dict[str, Callable[[], bool]] = {}

    def __call__(self, p: PodInfo, node: str, wanted: Callable[[], bool]) -> None:
        self.sent.append((p.name, node))
        self.wanted[p.name] = wanted


def nominations(
    lg: Ledger, max_pods: int = 100, leader: bool = True
) -> tuple[Nominations, Written]:
    n = Nominations(lg, KEYS, PreferenceArgs(nominate_max_pods=max_pods), lambda: leader)
    n.write = w = Written()
    return n, w


def pending(name: str, cpu: str = "1", nominated: str = "", **more: Any) -> PodInfo:
    p = info(pod(name, requests={"cpu": cpu}, **more))
    return msgspec.structs.replace(p, nominated=nominated)


def packing(name: str, cpu: str = "1", gpu: str = "1", **more: Any) -> PodInfo:
    return pending(name, cpu, limits={R: gpu}, annotations={KEYS.pack: "gpu"}, **more)


def preferring(name: str, prefer: str, cpu: str = "1", **more: Any) -> PodInfo:
    return pending(name, cpu, annotations={KEYS.prefer: prefer}, **more)


def upsert(n: Nominations, p: PodInfo) -> None:
    n.on_pod(PodEvent(PodChange.UPSERT, p.uid, p))


def gone(n: Nominations, p: PodInfo) -> None:
    n.on_pod(PodEvent(PodChange.GONE, p.uid, None))


@pytest.mark.parametrize(
    ("name", "gpu", "pods", "expected"),
    [
        # pack: the fullest node first (all equal: by name), each filled to its room (2).
        (
            "pack a burst",
            None,
            [packing(f"p{i}") for i in range(7)],
            ["n1", "n1", "n2", "n2", "n3", "n3", None],
        ),
        # pack on a resource one node has: only there, up to its room.
        ("pack on one node", {"n2": 1}, [packing("p0"), packing("p1")], ["n2", None]),
        # pack on nothing that exists: no nomination.
        (
            "pack a missing resource",
            None,
            [pending("p0", annotations={KEYS.pack: "nothing"})],
            [None],
        ),
        # A room of cpu: 4 cpu a node, 3 cpu a pod (the gpu leaves room for 2).
        (
            "pack counts cpu too",
            None,
            [packing(f"p{i}", cpu="3") for i in range(4)],
            ["n1", "n2", "n3", None],
        ),
        # prefer a label: round-robin among its nodes, each to its room (4 cpu).
        (
            "prefer a label",
            None,
            [preferring(f"p{i}", "zone=b", cpu="2") for i in range(5)],
            ["n1", "n2", "n1", "n2", None],
        ),
        # The first alternative some node with room satisfies.
        (
            "prefer falls through",
            None,
            [preferring(f"p{i}", "zone=c, zone=a", cpu="3") for i in range(2)],
            ["n3", None],
        ),
        # prefer a resource: a node with a unit free.
        ("prefer a resource", {"n3": 1}, [preferring("p0", "gpu")], ["n3"]),
        # Hostile or empty preferences name nothing: no nomination.
        (
            "prefer nothing that exists",
            None,
            [preferring("p0", "zone=nowhere, no-such-resource, ,,=,x=")],
            [None],
        ),
        # Only the first 4 alternatives are looked at: a 5th that n3 satisfies is not.
        (
            "a fifth alternative",
            None,
            [preferring("p0", "zone=c, zone=d, zone=e, zone=f, zone=a")],
            [None],
        ),
        # A gang member is the gang's to nominate; a pod behind the gang's gate has no cycle.
        ("a gang member", None, [packing("p0", labels={KEYS.gang: "g"})], [None]),
        ("a held pod", None, [packing("p0", gates=[KEYS.gate])], [None]),
        ("no preference", None, [pending("p0")], [None]),
    ],
)
def test_which_node_each_pod_is_nominated_for(
    name: str, gpu: Mapping[str, int] | None, pods: list[PodInfo], expected: list[str | None]
) -> None:
    n, written = nominations(ledger(gpu=gpu))
    for p in pods:
        upsert(n, p)
    by_pod = dict(written.sent)
    assert [by_pod.get(p.name) for p in pods] == expected, name


def test_a_pod_bound_or_gone_gives_its_room_back() -> None:
    lg = ledger(gpu={"n1": 2})
    n, written = nominations(lg)
    a, b, c = (packing(x) for x in "abc")
    upsert(n, a)
    upsert(n, b)
    upsert(n, c)  # n1 is full with a and b nominated
    assert written.sent == [("a", "n1"), ("b", "n1")]
    assert n.nominated("n1") == {"cpu": 2000, "pods": 2, R: 2}
    gone(n, b)  # deleted: its room is back, the pod seen already stays decided
    assert n.nominated("n1") == {"cpu": 1000, "pods": 1, R: 1}
    assert written.wanted["a"]() and not written.wanted["b"]()
    # a is bound: the ledger holds it now, so its nomination counts no more.
    lg.observe_bound(a.uid, "n1", a.requests)
    upsert(n, msgspec.structs.replace(a, node="n1"))
    assert n.nominated("n1") == {}
    assert not written.wanted["a"]()
    d = packing("d")
    upsert(n, d)
    assert written.sent[-1] == ("d", "n1")  # one unit left: a holds the other
    assert n.tracked() == 2  # c (decided: none) and d


def test_a_nomination_kube_scheduler_cleared_is_not_made_again() -> None:
    n, written = nominations(ledger())
    p = packing("p")
    upsert(n, p)
    assert written.sent == [("p", "n1")]
    upsert(n, p)  # the watch shows the pod before the nomination lands: nothing changes
    upsert(n, msgspec.structs.replace(p, nominated="n1"))  # it arrived
    assert n.nominated("n1")
    upsert(n, p)  # cleared: its cycle failed there
    assert n.nominated("n1") == {}
    assert written.sent == [("p", "n1")]  # not written again
    upsert(n, msgspec.structs.replace(p, nominated="n2"))  # preemption's nomination counts
    assert n.nominated("n2") == {"cpu": 1000, "pods": 1, R: 1}


def test_nominations_found_on_pods_are_counted_after_a_restart() -> None:
    """A restart keeps nothing: the first list shows the pods' nominations, counted again,
    so a burst after the restart does not nominate past the room."""
    n, written = nominations(ledger(gpu={"n1": 2, "n2": 2}))
    upsert(n, packing("old", nominated="n1"))
    upsert(n, packing("old2", nominated="n1"))
    upsert(n, packing("new"))
    assert written.sent == [("new", "n2")]


def test_a_node_gone_is_not_nominated() -> None:
    lg = ledger()
    n, written = nominations(lg)
    lg.remove_node("n1")
    upsert(n, packing("p"))
    assert written.sent == [("p", "n2")]


@pytest.mark.parametrize(
    ("leader", "max_pods", "expected"),
    [
        (False, 10, []),  # a follower nominates nothing
        (True, 2, [("p0", "n1"), ("p1", "n1")]),  # tracked pods bounded: p2 gets none
    ],
)
def test_followers_and_the_bound_make_none(
    leader: bool, max_pods: int, expected: list[tuple[str, str]]
) -> None:
    n, written = nominations(ledger(gpu={"n1": 5}), max_pods=max_pods, leader=leader)
    for i in range(3):
        upsert(n, packing(f"p{i}"))
    assert written.sent == expected
    assert n.tracked() <= max_pods
