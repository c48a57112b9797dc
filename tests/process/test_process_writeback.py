"""The write-back (extender.writeback.nodes) against an API server holding nodes
(fakeapi.Cluster): a burst becomes one patch per node, a 409 is read again and recomputed,
failures back off per node, drift is re-asserted, a step-down abandons, and `wait_durable`
answers by what reached the nodes. The patch body itself is table-tested (patch_body).

In the process tier: the back-offs and retries are waited out in real time (seconds a run).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from fakeapi import Cluster, connected

from extender.core.ledger import Ledger
from extender.core.pod import Keys
from extender.kube.handle import Handle
from extender.metrics import Metrics
from extender.writeback.args import WriteBackArgs
from extender.writeback.nodes import WriteBack, _Seen, patch_body

KEYS = Keys.for_domain("escher.io")

R, S = "escher.io/r", "escher.io/s"
NODES = ("n0", "n1")


@dataclass
class Setup:
    cluster: Cluster
    ledger: Ledger
    writeback: WriteBack
    metrics: Metrics
    leading: list[bool]

    def patches(self, node: str) -> list[dict[str, object]]:
        return [
            json.loads(r.content)
            for r in self.cluster.sent("PATCH", f"/api/v1/nodes/{node}/status")
        ]

    def shown(self, node: str) -> dict[str, str]:
        """The domain's keys in the node's allocatable (the same in capacity, checked)."""
        status = self.cluster.node(node)["status"]
        mine = {k: v for k, v in status["allocatable"].items() if k.startswith("escher.io/")}
        assert mine == {k: v for k, v in status["capacity"].items() if k.startswith("escher.io/")}
        return mine

    async def durable(self, timeout: float = 5.0) -> bool:
        return await self.writeback.wait_durable(self.ledger.version, NODES, timeout)


@contextlib.asynccontextmanager
async def running(
    tmp_path: Path,
    advertised: dict[str, int] | None = None,
    nodes: tuple[str, ...] = NODES,
    qps: float = 1000,
    **settings: float,
) -> AsyncIterator[Setup]:
    cluster = Cluster()
    for n in nodes:
        cluster.add_node(n)
    ledger = Ledger("escher.io")
    for n in nodes:
        ledger.upsert_node(n, {}, {"cpu": 4000, "pods": 110}, {}, ())
    config = WriteBackArgs(
        coalesce_seconds=settings.pop("coalesce", 0.05),
        backoff_initial_seconds=settings.pop("backoff", 0.05),
        backoff_max_seconds=0.4,
    )
    metrics, leading = Metrics(), [True]
    async with connected(cluster, tmp_path, qps=qps) as api:
        handle = Handle(api, "escher.io", ledger, KEYS, metrics, lambda: leading[0])
        wb = WriteBack(handle, config, advertised)
        for n in nodes:  # as the cluster view reports each node at start
            wb.node_seen(n, cluster.node(n)["metadata"]["resourceVersion"], {}, {})
        task = asyncio.create_task(wb.run())
        try:
            yield Setup(cluster, ledger, wb, metrics, leading)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def scenario(
    tmp_path: Path,
    body: Callable[[Setup], object],
    advertised: dict[str, int] | None = None,
    **settings: float,
) -> None:
    async def run() -> None:
        async with running(tmp_path, advertised, **settings) as s:
            await body(s)  # type: ignore[misc]

    asyncio.run(run())


def test_a_burst_of_changes_to_a_node_becomes_one_patch(tmp_path: Path) -> None:
    async def body(s: Setup) -> None:
        for value in range(1, 11):
            s.ledger.set_capacity(R, {"n0": value})
        s.ledger.set_capacity(S, {"n0": 3})
        assert await s.durable()
        assert s.shown("n0") == {R: "10", S: "3"}
        assert len(s.patches("n0")) == 1 and s.patches("n1") == []

    scenario(tmp_path, body, coalesce=0.1)


def test_advertised_markers_go_on_every_node_beside_the_domains_keys_never_into_the_ledger(
    tmp_path: Path,
) -> None:
    """Extender mode advertises the markers (kube-scheduler's queueing hints count them): on
    every node, with the domain's keys, not re-written once shown, and a step-down adopts
    only the domain's keys into the ledger."""
    marker = "scheduling.escher.io/gang"

    async def body(s: Setup) -> None:
        s.writeback.verify_all()
        s.ledger.set_capacity(R, {"n0": 2})
        assert await s.durable()
        for n, mine in (("n0", {R: "2"}), ("n1", {})):
            status = s.cluster.node(n)["status"]
            for section in ("capacity", "allocatable"):
                assert status[section][marker] == "1000000", (n, section)
            assert s.shown(n) == mine
        writes = len(s.patches("n0")) + len(s.patches("n1"))
        # What the cluster view reports of a node showing them is no drift.
        shown = {marker: 1_000_000, R: 2}
        s.writeback.node_seen(
            "n0", s.cluster.node("n0")["metadata"]["resourceVersion"], shown, shown
        )
        assert s.writeback.pending_nodes() == []
        await asyncio.sleep(0.2)
        assert len(s.patches("n0")) + len(s.patches("n1")) == writes
        s.leading[0] = False
        s.ledger.set_capacity(R, {"n0": 5})  # not written: abandoned on the step-down
        s.writeback.abandon()
        view = s.ledger.node("n0")
        assert view is not None and dict(view.ephemeral) == {R: 2}

    scenario(tmp_path, body, {marker: 1_000_000})


def test_a_policy_change_goes_before_a_pass_over_every_node(tmp_path: Path) -> None:
    """The markers' first write to every node (background) is under way at the client's QPS
    when a policy changes the last node: its write is taken at the next free slot, not after
    the pass (issue 58: at 5,000 nodes and 50 QPS that was 100 s)."""
    marker = "scheduling.escher.io/gang"
    nodes = tuple(f"n{i:03}" for i in range(120))

    async def run() -> None:
        async with running(tmp_path, {marker: 1_000_000}, nodes, qps=100, coalesce=0) as s:
            s.writeback.verify_all()
            while len(s.cluster.requests) < 20:  # the pass has started
                await asyncio.sleep(0.01)
            s.ledger.set_capacity(R, {nodes[-1]: 2})
            assert await s.writeback.wait_durable(s.ledger.version, [nodes[-1]], 10)
            patched = [
                r.url.path.split("/")[4]
                for r in s.cluster.requests
                if r.method == "PATCH" and r.url.path.endswith("/status")
            ]
            # Past what was in flight when it was noted (16 writes at most), and far from
            # last: the pass had most of its 120 nodes to go.
            assert patched.index(nodes[-1]) < 20 + 2 * 16, patched.index(nodes[-1])
            assert len(s.writeback.pending_nodes()) > 30
            assert s.patches(nodes[-1])[0]["status"]["capacity"][R] == "2"

    asyncio.run(run())


def test_a_conflict_reads_the_node_again_and_leaves_other_writers_keys_alone(
    tmp_path: Path,
) -> None:
    async def body(s: Setup) -> None:
        # Another writer changes the node after the write-back saw it: its view is stale.
        node = s.cluster.node("n0")
        node["status"]["allocatable"]["example.com/gpu"] = "2"
        s.cluster.put("nodes", "n0", node)
        s.ledger.set_capacity(R, {"n0": 2})
        assert await s.durable()
        first, second = s.patches("n0")
        assert first["metadata"] != second["metadata"]  # recomputed on the version read
        reads = s.cluster.sent("GET", "/api/v1/nodes/n0/status")
        assert len(reads) == 1
        assert s.shown("n0") == {R: "2"}
        assert s.cluster.node("n0")["status"]["allocatable"]["example.com/gpu"] == "2"

    scenario(tmp_path, body)


def test_failures_back_off_per_node_and_the_node_is_written_when_they_stop(
    tmp_path: Path,
) -> None:
    async def body(s: Setup) -> None:
        s.cluster.fail("PATCH", "/api/v1/nodes/n0/", 500, times=4)
        s.ledger.set_capacity(R, {"n0": 1, "n1": 1})
        assert await s.writeback.wait_durable(s.ledger.version, ["n1"], 5)
        assert s.shown("n1") == {R: "1"}  # its neighbour's failures do not hold it back
        assert await s.durable()
        assert s.shown("n0") == {R: "1"}
        times = [r for r in s.cluster.requests if r.url.path == "/api/v1/nodes/n0/status"]
        assert len(s.patches("n0")) == 5
        assert len(times) > 5  # each retry read the node first (its view was stale)
        failures = s.metrics.writeback_failures.labels("server_error")._value.get()
        assert failures == 4

    scenario(tmp_path, body)


def test_retries_wait_longer_each_time(tmp_path: Path) -> None:
    async def body(s: Setup) -> None:
        s.cluster.fail("PATCH", "/api/v1/nodes/n0/", 500, times=3)
        s.ledger.set_capacity(R, {"n0": 1})
        assert await s.durable()
        sent = [
            t
            for r, t in zip(s.cluster.requests, s.cluster.times, strict=True)
            if r.method == "PATCH"
        ]
        gaps = [b - a for a, b in itertools.pairwise(sent)]
        assert len(gaps) == 3
        # 0.1, 0.2, 0.4 (doubling from the initial 0.1, capped at 0.4), plus the read
        assert gaps[0] >= 0.1 and gaps[1] >= 0.2 and gaps[2] >= 0.4

    scenario(tmp_path, body, backoff=0.1)


def test_a_node_changed_by_someone_else_is_set_back(tmp_path: Path) -> None:
    async def body(s: Setup) -> None:
        s.ledger.set_capacity(R, {"n0": 2})
        assert await s.durable()
        # Someone (a kubelet re-registering) resets it; the view reports what it saw.
        node = s.cluster.node("n0")
        for section in ("capacity", "allocatable"):
            node["status"][section][R] = "0"
        s.cluster.put("nodes", "n0", node)
        version = node["metadata"]["resourceVersion"]
        s.writeback.node_seen("n0", version, {R: 0}, {R: 0})
        for _ in range(100):
            if s.shown("n0") == {R: "2"}:
                break
            await asyncio.sleep(0.02)
        assert s.shown("n0") == {R: "2"}
        # What is kept per node, from the view and from the API's replies, is never walked
        # by the garbage collector: one per node, replaced on each update.
        kept = s.writeback._seen.values()
        assert kept and not any(gc.is_tracked(x) for k in kept for x in vars_of(k))

    scenario(tmp_path, body)


def vars_of(seen: _Seen) -> tuple[object, ...]:
    return (seen, seen.capacity, seen.allocatable)


def test_nothing_is_written_while_not_leading_and_a_step_down_abandons(tmp_path: Path) -> None:
    async def body(s: Setup) -> None:
        s.leading[0] = False
        s.ledger.set_capacity(R, {"n0": 5})
        assert not await s.durable(timeout=0.3)  # not leading: never durable
        assert s.patches("n0") == []
        assert s.writeback.abandon() == 1
        # The ledger takes back what the node showed, and nothing is left to write.
        view = s.ledger.node("n0")
        assert view is not None and view.ephemeral == {}
        assert s.writeback.pending_nodes() == []
        s.leading[0] = True
        await asyncio.sleep(0.7)
        assert s.patches("n0") == []

    scenario(tmp_path, body)


def test_a_write_in_flight_at_a_step_down_that_fails_after_it_brings_nothing_back(
    tmp_path: Path,
) -> None:
    """A step-down abandons every change not written yet; a write in flight then, failing
    after it, is dropped too rather than noted again to retry (tests/unit/service's
    step-down test once found its node pending again), and the ledger takes back what the
    node shows."""

    async def body(s: Setup) -> None:
        gate = asyncio.Event()
        s.cluster.hold["/api/v1/nodes/n0/status"] = gate
        s.cluster.fail("PATCH", "/api/v1/nodes/n0/", 500)
        s.ledger.set_capacity(R, {"n0": 5})
        assert not await s.durable(timeout=0.3)  # the write is in flight, held
        s.leading[0] = False
        s.writeback.abandon()
        gate.set()  # ... and fails now
        await asyncio.sleep(0.3)
        assert s.writeback.pending_nodes() == []
        view = s.ledger.node("n0")
        assert view is not None and view.ephemeral == {}
        assert s.shown("n0") == {}

    scenario(tmp_path, body)


def test_wait_durable_waits_for_a_write_in_flight(tmp_path: Path) -> None:
    async def body(s: Setup) -> None:
        gate = asyncio.Event()
        s.cluster.hold["/api/v1/nodes/n0/status"] = gate
        s.ledger.set_capacity(R, {"n0": 1})
        assert not await s.durable(timeout=0.3)  # the patch is held by the API server
        assert s.writeback.pending_nodes() == ["n0"]
        waiting = asyncio.create_task(s.durable())
        await asyncio.sleep(0.1)
        assert not waiting.done()
        gate.set()
        assert await waiting
        assert s.writeback.pending_nodes() == []

    scenario(tmp_path, body)


def test_a_node_deleted_meanwhile_counts_as_durable(tmp_path: Path) -> None:
    async def body(s: Setup) -> None:
        s.cluster.delete("nodes", "n1")
        s.ledger.set_capacity(R, {"n0": 1, "n1": 1})
        assert await s.durable()
        assert s.shown("n0") == {R: "1"}

    scenario(tmp_path, body)


@pytest.mark.parametrize(
    ("capacity", "allocatable", "desired", "patch"),
    [
        ({}, {}, {}, None),
        ({R: 2}, {R: 2}, {R: 2}, None),
        ({}, {}, {R: 2}, {R: "2"}),
        ({R: 2}, {R: 2}, {}, {R: None}),  # null deletes the key
        ({R: 2}, {R: 1}, {R: 2}, {R: "2"}),  # the sections disagree: both are set
        ({R: None}, {R: None}, {R: 3}, {R: "3"}),  # a value the extender never wrote
        ({R: 1, S: 1}, {R: 1, S: 1}, {R: 1}, {S: None}),  # only the keys that change
    ],
)
def test_patch_body(
    capacity: dict[str, int | None],
    allocatable: dict[str, int | None],
    desired: dict[str, int],
    patch: dict[str, str | None] | None,
) -> None:
    body = patch_body(_Seen("7", capacity, allocatable), desired)
    if patch is None:
        assert body is None
    else:
        assert body == {
            "metadata": {"resourceVersion": "7"},
            "status": {"capacity": patch, "allocatable": patch},
        }


def test_a_capacity_lowered_below_pods_bound_meanwhile_is_written_as_it_is(
    tmp_path: Path,
) -> None:
    """kube-scheduler binds pods against the old capacity that the ledger hears of after a
    decrease: the node shows the capacity asked for, not what they hold, so that a unit one of
    them frees as it leaves is not free to kube-scheduler (tests/e2e/test_split.py)."""

    async def body(s: Setup) -> None:
        s.ledger.set_capacity(R, {"n0": 12})
        s.ledger.observe_bound("a", "n0", {R: 1})
        s.ledger.set_capacity(R, {"n0": 2})
        for pod in ("b", "c", "d"):  # bound against 12, reported after the decrease
            s.ledger.observe_bound(pod, "n0", {R: 1})
        assert await s.durable()
        assert s.shown("n0") == {R: "2"}
        s.ledger.release("b")
        assert await s.durable()
        assert s.shown("n0") == {R: "2"}

    scenario(tmp_path, body)
