"""The cluster view (extender.cluster.view) over an API server holding nodes and pods
(fakeapi.Cluster): what the ledger adopts from nodes while it is built and while it does not
lead, what it hands to the write-back otherwise, bound pods as facts, and pod events."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import builders
import msgspec
import pytest
from builders import KEYS
from fakeapi import Cluster, connected

from extender.cluster.view import ClusterView, Owned
from extender.core import quantity
from extender.core.events import PodChange, PodEvent, PodEvents
from extender.core.ledger import Ledger
from extender.core.objects import Node
from extender.metrics import Metrics

R = "escher.io/r"


@dataclass
class Setup:
    cluster: Cluster
    ledger: Ledger
    view: ClusterView
    adopting: list[bool]
    seen: list[tuple[str, Owned, Owned]] = field(default_factory=list)
    events: list[PodEvent] = field(default_factory=list)

    def ephemeral(self, node: str) -> dict[str, int]:
        view = self.ledger.node(node)
        assert view is not None
        return dict(view.ephemeral)


@contextlib.asynccontextmanager
async def watching(tmp_path: Path, cluster: Cluster) -> AsyncIterator[Setup]:
    ledger, events, adopting = Ledger("escher.io"), PodEvents(), [False]
    async with connected(cluster, tmp_path) as api:
        setup = Setup(cluster, ledger, None, adopting)  # type: ignore[arg-type]
        setup.view = ClusterView(
            api,
            ledger,
            KEYS,
            events,
            Metrics(),
            lambda: adopting[0],
            lambda node, _version, cap, alloc: setup.seen.append((node, cap, alloc)),
            advertised=KEYS.markers,
        )
        events.subscribe(setup.events.append)
        await setup.view.sync()
        tasks = [asyncio.create_task(i.run()) for i in (setup.view.nodes, setup.view.pods)]
        try:
            yield setup
        finally:
            for t in tasks:
                t.cancel()


async def until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "not within the timeout"
        await asyncio.sleep(0.01)


def run(tmp_path: Path, cluster: Cluster, body: Callable[[Setup], Any]) -> None:
    async def main() -> None:
        async with watching(tmp_path, cluster) as s:
            await body(s)

    asyncio.run(main())


def with_r(cluster: Cluster, node: str, value: str) -> None:
    """Another writer (or a previous leader) sets R on the node."""
    obj = cluster.node(node)
    for section in ("capacity", "allocatable"):
        obj["status"][section][R] = value
    cluster.put("nodes", node, obj)


def test_the_ledger_is_built_from_what_the_nodes_show(tmp_path: Path) -> None:
    cluster = Cluster()
    cluster.add_node("a", {R: "3"}, labels={"zone": "z1"})
    cluster.add_node("b", {R: "bogus"})  # not a value the extender wrote: not adopted

    async def body(s: Setup) -> None:
        assert s.ephemeral("a") == {R: 3} and s.ephemeral("b") == {}
        a = s.ledger.node("a")
        assert a is not None and a.labels == {"zone": "z1"}
        assert ("b", {R: None}, {R: None}) in s.seen  # shown to the write-back, to rewrite

    run(tmp_path, cluster, body)


def test_the_markers_are_shown_to_the_write_back_and_never_taken_into_the_ledger(
    tmp_path: Path,
) -> None:
    cluster = Cluster()
    marker = KEYS.gang_marker
    cluster.add_node("a", {R: "1", marker: "1000000"})

    async def body(s: Setup) -> None:
        a = s.ledger.node("a")
        assert a is not None and marker not in a.physical and s.ephemeral("a") == {R: 1}
        shown = {R: 1, marker: 1_000_000}
        assert ("a", shown, shown) in s.seen

    run(tmp_path, cluster, body)


def test_a_leader_keeps_its_values_and_a_follower_adopts_the_nodes(tmp_path: Path) -> None:
    cluster = Cluster()
    cluster.add_node("a", {R: "3"})

    async def body(s: Setup) -> None:
        with_r(cluster, "a", "5")  # leading (adopting false): the ledger stays the truth
        await until(lambda: ("a", {R: 5}, {R: 5}) in s.seen)
        assert s.ephemeral("a") == {R: 3}
        s.adopting[0] = True  # following: the node is the truth
        with_r(cluster, "a", "6")
        await until(lambda: s.ephemeral("a") == {R: 6})

    run(tmp_path, cluster, body)


def test_nodes_come_and_go(tmp_path: Path) -> None:
    cluster = Cluster()
    cluster.add_node("a")

    async def body(s: Setup) -> None:
        cluster.add_node("b")
        await until(lambda: sorted(s.ledger.node_names()) == ["a", "b"])
        cluster.delete("nodes", "a")
        await until(lambda: s.ledger.node_names() == ["b"])

    run(tmp_path, cluster, body)


def test_bound_pods_hold_their_requests_and_are_published_until_gone(tmp_path: Path) -> None:
    cluster = Cluster()
    cluster.add_node("a", {R: "3"})
    pending = builders.pod("p", uid="u1", limits={R: "1"})
    cluster.put("pods", "default/p", pending)

    async def body(s: Setup) -> None:
        assert [(e.change, e.uid) for e in s.events] == [(PodChange.UPSERT, "u1")]
        assert s.ledger.node("a").available(R) == 3  # type: ignore[union-attr]
        cluster.put("pods", "default/p", builders.pod("p", uid="u1", limits={R: "1"}, node="a"))
        await until(lambda: s.ledger.node("a").available(R) == 2)  # type: ignore[union-attr]
        finished = builders.pod("p", uid="u1", limits={R: "1"}, node="a", phase="Succeeded")
        cluster.put("pods", "default/p", finished)
        await until(lambda: s.ledger.node("a").available(R) == 3)  # type: ignore[union-attr]
        gone = s.events[-1]
        assert (gone.change, gone.uid, dict(gone.freed)) == (PodChange.GONE, "u1", {R: 1})

    run(tmp_path, cluster, body)


def test_a_malformed_pod_is_skipped_and_the_others_are_read(tmp_path: Path) -> None:
    cluster = Cluster()
    cluster.add_node("a", {R: "3"})
    cluster.put("pods", "default/bad", builders.pod("bad", uid="u0", limits={R: "-1"}, node="a"))
    cluster.put("pods", "default/ok", builders.pod("ok", uid="u1", limits={R: "1"}, node="a"))

    async def body(s: Setup) -> None:
        assert [e.uid for e in s.events] == ["u1"]
        assert s.ledger.node("a").available(R) == 2  # type: ignore[union-attr]

    run(tmp_path, cluster, body)


def test_pods_that_vanished_while_not_watched_are_reported_gone(tmp_path: Path) -> None:
    cluster = Cluster()
    cluster.add_node("a", {R: "3"})
    cluster.put("pods", "default/p", builders.pod("p", uid="u1", limits={R: "1"}, node="a"))

    async def body(s: Setup) -> None:
        cluster.delete("pods", "default/p")
        cluster.compact()  # the deletion's event is lost: only a new list shows it
        cluster.stop_watches()
        await until(lambda: s.events[-1].change is PodChange.GONE)
        assert s.ledger.node("a").available(R) == 3  # type: ignore[union-attr]

    run(tmp_path, cluster, body)


def test_in_mode_dra_node_status_is_neither_adopted_nor_reported_and_a_leftover_is_said(
    tmp_path: Path, caplog: Any
) -> None:
    """Mode dra keeps the resources in ResourceSlices: a domain key a node still shows (left
    by pure mode) is not the ledger's, and is warned about once, since kube-scheduler would
    use it instead of the devices on that node; a deleted node is reported gone."""
    cluster = Cluster()
    cluster.add_node("n0", allocatable={R: "3"})
    gone: list[str] = []

    async def body() -> None:
        ledger, events = Ledger("escher.io"), PodEvents()
        async with connected(cluster, tmp_path) as api:
            view = ClusterView(
                api,
                ledger,
                KEYS,
                events,
                Metrics(),
                lambda: True,
                node_resources=False,
                on_node_gone=gone.append,
            )
            await view.sync()
            task = asyncio.create_task(view.nodes.run())
            node = ledger.node("n0")
            assert node is not None and dict(node.ephemeral) == {} and R not in node.physical
            cluster.put("nodes", "n0", cluster.node("n0"))  # seen again: said once only
            cluster.delete("nodes", "n0")
            await until(lambda: gone == ["n0"])
            task.cancel()

    asyncio.run(body())
    warned = [r for r in caplog.records if "node status shows a resource" in r.getMessage()]
    assert len(warned) == 1 and warned[0].node == "n0"  # type: ignore[attr-defined]


def test_in_mode_dra_a_bound_pod_holds_only_what_no_claim_counts(tmp_path: Path) -> None:
    """Mode dra: kube-scheduler allocates a pod's domain requests as devices in a claim,
    which the slice publisher counts; the pod itself holds only its other requests, so
    nothing is counted twice (and a pod event still reports it)."""
    cluster = Cluster()
    cluster.add_node("n0")
    pod = builders.pod("p", uid="u1", limits={R: "2", "cpu": "1"}, node="n0")
    cluster.put("pods", "default/p", pod)

    async def body() -> None:
        ledger, events = Ledger("escher.io"), PodEvents()
        seen: list[PodEvent] = []
        events.subscribe(seen.append)
        async with connected(cluster, tmp_path) as api:
            view = ClusterView(
                api, ledger, KEYS, events, Metrics(), lambda: True, node_resources=False
            )
            await view.sync()
        held = ledger.holding("u1")
        assert held is not None and dict(held.amounts) == {"cpu": 1000, "pods": 1}
        assert [e.uid for e in seen] == ["u1"]

    asyncio.run(body())


def test_a_node_new_to_the_ledger_after_the_first_sync_is_announced_once(tmp_path: Path) -> None:
    """What the policy objects re-apply to a recreated node: nodes of the first list are not
    new, a node added later is, once, and again after it was deleted and created anew."""
    cluster = Cluster()
    cluster.add_node("n0")
    added: list[str] = []

    async def body() -> None:
        ledger, events = Ledger("escher.io"), PodEvents()
        async with connected(cluster, tmp_path) as api:
            view = ClusterView(
                api, ledger, KEYS, events, Metrics(), lambda: False, on_node_added=added.append
            )
            await view.sync()
            task = asyncio.create_task(view.nodes.run())
            cluster.add_node("n1")
            cluster.put("nodes", "n1", cluster.node("n1"))  # a change is not an addition
            cluster.delete("nodes", "n1")
            cluster.add_node("n1")
            await until(lambda: len(added) == 2)
            await asyncio.sleep(0.1)
            task.cancel()

    asyncio.run(body())
    assert added == ["n1", "n1"]


def _node(rv: int, **change: Any) -> Node:
    """A kwok-like node as the watch decodes it; `change` replaces parts of it."""
    raw: dict[str, Any] = {
        "metadata": {"name": "n1", "resourceVersion": str(rv), "labels": {"zone": "a"}},
        "spec": {"taints": [{"key": "kwok", "value": "fake", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "4", "pods": "110", "escher.io/fo": "2"},
            "capacity": {"cpu": "4", "pods": "110", "escher.io/fo": "2"},
            # What a heartbeat changes, and the view does not read.
            "conditions": [{"type": "Ready", "lastHeartbeatTime": f"2026-11-27T00:00:{rv:02d}Z"}],
        },
    }
    for path, value in change.items():
        *parents, leaf = path.split("__")
        at = raw
        for p in parents:
            at = at[p]
        at[leaf] = value
    return msgspec.json.decode(msgspec.json.encode(raw), type=Node)


@pytest.mark.parametrize(
    ("change", "follower", "looked"),
    [
        ({}, False, False),  # a heartbeat: only resourceVersion and conditions changed
        ({"metadata__labels": {"zone": "b"}}, False, True),
        ({"spec__taints": []}, False, True),
        ({"spec__unschedulable": True}, False, True),
        ({"status__allocatable": {"cpu": "3", "pods": "110", "escher.io/fo": "2"}}, False, True),
        ({"status__allocatable": {"cpu": "4", "pods": "110", "escher.io/fo": "1"}}, False, True),
        ({"status__capacity": {"cpu": "4", "pods": "110", "escher.io/fo": "3"}}, False, True),
        ({}, True, True),  # this replica stopped leading: it adopts what the node shows
    ],
)
def test_a_node_event_that_changes_nothing_read_skips_the_full_look(
    change: dict[str, Any], follower: bool, looked: bool
) -> None:
    """kubelet's (and kwok's) heartbeats are a node event every 10-60 s per node, all of
    them reading the same: the view skips parsing and the ledger's upsert for them, and
    hands the write-back only the new resourceVersion. Any change it reads is a full look."""
    ledger = Ledger("escher.io")
    upserts: list[str] = []
    upsert = ledger.upsert_node
    ledger.upsert_node = lambda name, *a, **k: upserts.append(name) or upsert(name, *a, **k)  # type: ignore[method-assign]
    seen: list[tuple[str, Owned, Owned]] = []
    adopting = [False]
    view = ClusterView(
        None,  # type: ignore[arg-type]  # _node makes no call
        ledger,
        KEYS,
        PodEvents(),
        Metrics(),
        lambda: adopting[0],
        lambda _node, version, cap, alloc: seen.append((version, cap, alloc)),
    )
    view._node("ADDED", _node(1))  # building: adopted
    view._building = False
    view._node("MODIFIED", _node(1))  # leading: a full look again (adopting changed)
    ledger.set_capacity("escher.io/fo", {"n1": 5})  # the leader's own value, not written yet
    upserts.clear()
    adopting[0] = follower
    node = _node(2, **change)
    view._node("MODIFIED", node)
    assert (upserts == ["n1"]) is looked
    # The write-back always learns the node's new version, and what it shows.
    shows = {
        r: {"escher.io/fo": int(getattr(node.status, r)["escher.io/fo"])}
        for r in ("capacity", "allocatable")
    }
    assert seen[-1] == ("2", shows["capacity"], shows["allocatable"])
    mirror = ledger.node("n1")
    assert mirror is not None
    assert (dict(mirror.labels), mirror.unschedulable, len(mirror.taints)) == (
        node.metadata.labels,
        node.spec.unschedulable,
        len(node.spec.taints),
    )
    assert mirror.physical["cpu"] == quantity.amount(
        "cpu", node.status.allocatable["cpu"], field="cpu"
    )
    # A follower mirrors the node; the leader keeps its own value.
    assert mirror.ephemeral == ({"escher.io/fo": 2} if follower else {"escher.io/fo": 5})


def test_what_the_view_keeps_per_node_is_never_walked_by_the_garbage_collector() -> None:
    """One look per node, replaced when the node changes: at 5,000 nodes every tracked one
    lengthened every full collection, which stops the event loop (issue 28)."""
    view = ClusterView(
        None,  # type: ignore[arg-type]  # _node makes no call
        Ledger("escher.io"),
        KEYS,
        PodEvents(),
        Metrics(),
        lambda: False,
        advertised=KEYS.markers,
    )
    view._node("ADDED", _node(1))
    view._building = False
    view._node("MODIFIED", _node(2, metadata__labels={"zone": "b"}))
    gc.collect(0)  # where CPython untracks the tuples that hold only untracked objects
    look = view._looked["n1"]
    assert look.labels == {"zone": "b"} and look.spec.taints
    kept = (look, look.status, look.spec, look.spec.taints, *look.spec.taints, look.labels)
    assert not any(gc.is_tracked(x) for x in (*kept, look.capacity, look.shown))
