"""The dra mode's write-back (extender.dra.slices) against an API server holding
ResourceSlices, ResourceClaims and DeviceClasses (fakeapi.Cluster): a capacity becomes a pool
of devices in slices of at most 128 under one generation, a DeviceClass maps the resource
name, allocated devices survive a decrease, the guard refuses what cannot be published (and
another's class or slice) before anything changes, slices are adopted while the ledger is
built, and drift is re-asserted. The naming helpers are table-tested."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fakeapi import Cluster, connected

from extender.core.errors import Conflict, InvalidValue
from extender.core.ledger import HolderKind, Ledger
from extender.core.pod import Keys
from extender.dra.args import DraArgs
from extender.dra.devices import Want, device_names, dns_name, pool_name, publication
from extender.dra.objects import MANAGED_BY
from extender.dra.slices import SlicePublisher
from extender.kube.handle import Handle
from extender.metrics import Metrics
from extender.policies import api as policy
from extender.writeback.args import WriteBackArgs

KEYS = Keys.for_domain("escher.io")

R = "escher.io/r"
NODES = ("n0", "n1")


@dataclass
class Setup:
    cluster: Cluster
    ledger: Ledger
    publisher: SlicePublisher
    leading: list[bool]

    def slices(self, node: str = "n0", resource: str = "r") -> list[dict[str, Any]]:
        """The node's slices of `resource` in the cluster, by name."""
        objs = self.cluster.kinds["resourceslices"].objects
        return [
            objs[k]
            for k in sorted(objs)
            if objs[k]["spec"]["nodeName"] == node
            and objs[k]["spec"]["pool"]["name"].startswith(f"{node}/{resource}/")
        ]

    def devices(self, node: str = "n0", resource: str = "r") -> list[str]:
        return [d["name"] for s in self.slices(node, resource) for d in s["spec"]["devices"]]

    async def durable(self, timeout: float = 5.0) -> bool:
        return await self.publisher.wait_durable(self.ledger.version, NODES, timeout)

    def claim(self, uid: str, *devices: tuple[str, str]) -> None:
        self.cluster.put("resourceclaims", uid, claim(uid, *devices))


def claim(uid: str, *devices: tuple[str, str]) -> dict[str, Any]:
    """A ResourceClaim kube-scheduler allocated: (pool, device) of our driver."""
    results = [{"request": "r", "driver": "escher.io", "pool": p, "device": d} for p, d in devices]
    return {
        "metadata": {"name": uid, "namespace": "default", "uid": uid},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def ours(
    name: str, node: str, resource: str, devices: list[str], gen: int = 1, count: int = 1
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {MANAGED_BY[0]: MANAGED_BY[1], "escher.io/resource": resource},
        },
        "spec": {
            "driver": "escher.io",
            "nodeName": node,
            "pool": {
                "name": pool_name(node, resource),
                "generation": gen,
                "resourceSliceCount": count,
            },
            "devices": [{"name": d} for d in devices],
        },
    }


@contextlib.asynccontextmanager
async def running(
    tmp_path: Path,
    before: Callable[[Cluster], None] | None = None,
    max_slices: int = 16,
    skip: bool = False,
) -> AsyncIterator[Setup]:
    cluster = Cluster()
    if before is not None:
        before(cluster)
    ledger = Ledger("escher.io")
    for n in NODES:
        ledger.upsert_node(n, {}, {"cpu": 4000, "pods": 110}, None, ())
    dra = DraArgs(max_slices=max_slices, skip_node_operations=skip)
    writeback = WriteBackArgs(
        coalesce_seconds=0.02, backoff_initial_seconds=0.05, backoff_max_seconds=0.4
    )
    leading = [True]
    async with connected(cluster, tmp_path) as api:
        handle = Handle(api, "escher.io", ledger, KEYS, Metrics(), lambda: leading[0])
        pub = SlicePublisher(handle, dra, writeback)
        ledger.guard = pub.guard
        await pub.sync()
        tasks = [asyncio.create_task(pub.run())]
        tasks += [asyncio.create_task(i.run()) for i in pub.informers()]
        try:
            yield Setup(cluster, ledger, pub, leading)
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await t


def scenario(tmp_path: Path, body: Callable[[Setup], Any], **kw: Any) -> None:
    async def run() -> None:
        async with running(tmp_path, **kw) as s:
            await body(s)

    asyncio.run(run())


async def settled(s: Setup, check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "not settled"
        await asyncio.sleep(0.02)


def test_a_capacity_becomes_a_pool_of_devices_and_a_device_class_maps_the_name(
    tmp_path: Path,
) -> None:
    async def body(s: Setup) -> None:
        s.ledger.set_capacity(R, {"n0": 3})
        assert await s.durable()
        (one,) = s.slices()
        assert one["spec"]["pool"] == {"name": "n0/r/0", "generation": 1, "resourceSliceCount": 1}
        assert s.devices() == ["u0", "u1", "u2"]
        assert one["spec"]["devices"][0]["attributes"] == {"resource": {"string": "r"}}
        cls = s.cluster.kinds["deviceclasses"].objects["r.escher.io"]
        assert cls["spec"]["extendedResourceName"] == R
        assert 'device.attributes["escher.io"].resource == "r"' in str(cls["spec"]["selectors"])
        assert s.slices("n1") == []

    scenario(tmp_path, body)


@pytest.mark.parametrize(
    ("first", "then", "sizes", "writes"),
    [
        (300, 100, [100], 3),  # pool 0 rewritten, pools 1 and 2 deleted
        (100, 300, [128, 128, 44], 3),
        (128, 129, [128, 1], 1),  # pool 0 untouched, pool 1 created
        (5, 2, [2], 1),
        (200, 200, [128, 72], 0),
    ],
)
def test_a_capacity_is_pools_of_one_slice_and_a_change_writes_only_the_pools_it_changes(
    tmp_path: Path, first: int, then: int, sizes: list[int], writes: int
) -> None:
    async def body(s: Setup) -> None:
        s.ledger.set_capacity(R, {"n0": first})
        assert await s.durable()
        before = len([r for r in s.cluster.requests if r.method in ("POST", "PUT", "DELETE")])
        s.ledger.set_capacity(R, {"n0": then})
        assert await s.durable()
        after = len([r for r in s.cluster.requests if r.method in ("POST", "PUT", "DELETE")])
        assert after - before == writes
        got = s.slices()
        assert [len(x["spec"]["devices"]) for x in got] == sizes
        for x in got:  # each device in pool index // 128, each pool complete in one slice
            pool = x["spec"]["pool"]
            assert pool["resourceSliceCount"] == 1
            index = int(pool["name"].rsplit("/", 1)[1])
            assert {int(d["name"][1:]) // 128 for d in x["spec"]["devices"]} == {index}
        assert len(set(s.devices())) == then

    scenario(tmp_path, body)


def test_a_decrease_keeps_every_device_a_claim_holds(tmp_path: Path) -> None:
    async def body(s: Setup) -> None:
        s.ledger.set_capacity(R, {"n0": 200})
        assert await s.durable()
        s.claim("c1", ("n0/r/1", "u150"))
        s.claim("c2", ("n0/r/0", "u7"), ("other/pool/0", "u1"))
        await settled(s, lambda: "n0/r" in s.publisher._holdings.allocated)
        s.ledger.set_capacity(R, {"n0": 4})
        assert await s.durable()
        assert s.devices() == ["u0", "u1", "u7", "u150"]
        # The claim released: its device stays published, free, rather than swapped for
        # another (kube-scheduler may have given it to a pod whose claim is not seen yet).
        s.cluster.delete("resourceclaims", "c1")
        await settled(s, lambda: s.ledger.node("n0").used == {R: 1})  # type: ignore[union-attr]
        assert s.devices() == ["u0", "u1", "u7", "u150"]
        s.ledger.set_capacity(R, {"n0": 3})  # a decrease drops free devices, highest first
        assert await s.durable()
        assert s.devices() == ["u0", "u1", "u7"]

    scenario(tmp_path, body)


def test_the_claims_are_the_allocations_a_decrease_is_checked_against(tmp_path: Path) -> None:
    """Mode dra's allocations are the claims kube-scheduler writes (before it binds the pod):
    each holds its devices in the ledger, per node and resource, so get_cluster_state counts
    them and a decrease below them is refused; a claim released frees them. A device of a
    pool another writer publishes is not counted."""

    async def body(s: Setup) -> None:
        s.ledger.set_capacity(R, {"n0": 3, "n1": 3})
        assert await s.durable()
        s.claim("c1", ("n0/r/0", "u0"), ("n0/r/0", "u1"))
        s.claim("c2", ("n1/r/0", "u2"), ("n1/gone/0", "u0"))  # a name no slice has shown
        await settled(s, lambda: s.ledger.node("n1").used == {R: 1})  # type: ignore[union-attr]
        assert s.ledger.node("n0").used == {R: 2}  # type: ignore[union-attr]
        held = s.ledger.holding("claim:c1:n0")
        assert held is not None and held.kind is HolderKind.CLAIM
        assert policy.cluster_state(s.ledger.snapshot()).nodes["n0"][R].allocated == 2
        with pytest.raises(Conflict, match="below the 2 already allocated"):
            s.ledger.set_capacity(R, {"n0": 1})
        s.cluster.delete("resourceclaims", "c1")
        await settled(s, lambda: s.ledger.node("n0").used == {})  # type: ignore[union-attr]
        s.ledger.set_capacity(R, {"n0": 1})
        assert s.ledger.holding("claim:c1:n0") is None

    scenario(tmp_path, body)


def test_claims_are_held_again_after_a_restart_even_one_seen_before_its_slice(
    tmp_path: Path,
) -> None:
    """A restarted replica rebuilds the same holdings from the claims, and a follower keeps
    them as the leader does; a claim whose device's resource no slice has shown yet (two
    watches, no order between them) is counted once one does."""

    def before(cluster: Cluster) -> None:
        cluster.put("resourceslices", "a", ours("a", "n0", "r", ["u0", "u1", "u2"]))
        cluster.put("resourceclaims", "c1", claim("c1", ("n0/r/0", "u1")))
        cluster.put("resourceclaims", "c2", claim("c2", ("n1/late/0", "u1")))

    async def body(s: Setup) -> None:
        assert s.ledger.node("n0").used == {R: 1}  # type: ignore[union-attr]
        assert s.ledger.node("n1").used == {}  # type: ignore[union-attr]
        s.cluster.put("resourceslices", "b", ours("b", "n1", "late", ["u0", "u1"]))
        late = "escher.io/late"
        await settled(s, lambda: s.ledger.node("n1").used == {late: 1})  # type: ignore[union-attr]
        s.leading[0] = False
        s.claim("c3", ("n0/r/0", "u2"))
        await settled(s, lambda: s.ledger.node("n0").used == {R: 2})  # type: ignore[union-attr]

    scenario(tmp_path, body, before=before)


@pytest.mark.parametrize(("skip", "field"), [(False, None), (True, ["*"])])
def test_slices_ask_kubelets_for_no_node_operations_only_when_told(
    tmp_path: Path, skip: bool, field: list[str] | None
) -> None:
    async def body(s: Setup) -> None:
        s.ledger.set_capacity(R, {"n0": 1})
        assert await s.durable()
        (one,) = s.slices()
        assert one["spec"].get("skipNodeOperations") == field

    scenario(tmp_path, body, skip=skip)


def test_a_device_claimed_after_a_decrease_unpublished_it_is_published_again(
    tmp_path: Path,
) -> None:
    """kube-scheduler allocates in memory and writes the claim after: a decrease may have
    unpublished the device meanwhile. The node must show it again while it is held (within
    the capacity: the late pod holds one of the 2 units)."""

    async def body(s: Setup) -> None:
        s.ledger.set_capacity(R, {"n0": 10})
        assert await s.durable()
        s.ledger.set_capacity(R, {"n0": 2})
        assert await s.durable()
        assert s.devices() == ["u0", "u1"]
        s.claim("late", ("n0/r/0", "u7"))
        await settled(s, lambda: "u7" in s.devices())
        assert s.devices() == ["u0", "u7"]

    scenario(tmp_path, body)


def test_a_device_claimed_while_the_decrease_is_being_written_is_published_again(
    tmp_path: Path,
) -> None:
    """The claim arrives while the write that unpublishes its device is in flight: the slice
    seen then still shows the device, so only the slice our write brings back tells that
    it is missing. It is published again all the same (CI caught this race on the real
    control plane: tests/e2e/test_dra.py)."""

    async def body(s: Setup) -> None:
        s.ledger.set_capacity(R, {"n0": 10})
        assert await s.durable()
        api = s.publisher._api
        send = api.request

        async def claimed_meanwhile(method: str, path: str, **kw: Any) -> bytes:
            if method == "PUT" and "resourceslices" in path and not s.publisher._holdings.held:
                s.claim("late", ("n0/r/0", "u7"))
                await settled(s, lambda: bool(s.publisher._holdings.held))
            return await send(method, path, **kw)

        api.request = claimed_meanwhile  # type: ignore[method-assign]
        s.ledger.set_capacity(R, {"n0": 2})
        await settled(s, lambda: s.devices() == ["u0", "u7"])

    scenario(tmp_path, body)


def test_what_a_pool_cannot_hold_is_refused_naming_the_limit_and_nothing_is_published(
    tmp_path: Path,
) -> None:
    async def body(s: Setup) -> None:
        s.ledger.set_capacity(R, {"n0": 2})
        assert await s.durable()
        version = s.ledger.version
        with pytest.raises(InvalidValue, match=r"above 256.*2 ResourceSlices") as e:
            s.ledger.set_capacity(R, {"n0": 3, "n1": 257})
        assert e.value.field == "capacity"
        assert s.ledger.version == version and s.ledger.node("n0").ephemeral == {R: 2}  # type: ignore[union-attr]
        s.ledger.set_capacity(R, {"n1": 256})  # exactly the limit
        assert await s.durable()
        assert len(s.slices("n1")) == 2

    scenario(tmp_path, body, max_slices=2)


def foreign_class(cluster: Cluster) -> None:
    cluster.put(
        "deviceclasses",
        "gpu.vendor.example",
        {
            "metadata": {"name": "gpu.vendor.example"},
            "spec": {"extendedResourceName": "escher.io/taken"},
        },
    )


def foreign_slice(cluster: Cluster) -> None:
    slice_ = ours("theirs", "n1", "r", ["d0"])
    del slice_["metadata"]["labels"][MANAGED_BY[0]]
    cluster.put("resourceslices", "theirs", slice_)


@pytest.mark.parametrize(
    ("before", "resource", "node", "match"),
    [
        (foreign_class, "escher.io/taken", "n0", "DeviceClass gpu.vendor.example"),
        (foreign_slice, R, "n1", "ResourceSlice theirs of driver escher.io"),
    ],
)
def test_another_writers_class_or_slice_is_refused_never_adopted_or_overwritten(
    tmp_path: Path, before: Callable[[Cluster], None], resource: str, node: str, match: str
) -> None:
    async def body(s: Setup) -> None:
        objects = {k: dict(v.objects) for k, v in s.cluster.kinds.items()}
        with pytest.raises(Conflict, match=match) as e:
            s.ledger.set_capacity(resource, {node: 1})
        assert e.value.field == "name"
        assert s.ledger.node(node).ephemeral == {}  # type: ignore[union-attr]
        await asyncio.sleep(0.1)
        assert {k: dict(v.objects) for k, v in s.cluster.kinds.items()} == objects
        s.ledger.set_capacity(R if resource != R else "escher.io/free", {node: 1})
        assert await s.durable()  # other names and nodes are published as usual
        assert s.cluster.kinds["resourceslices"].objects.get("theirs") == objects[
            "resourceslices"
        ].get("theirs")

    scenario(tmp_path, body, before=before)


def test_slices_are_the_truth_while_the_ledger_is_built_an_incomplete_pool_counts_nothing(
    tmp_path: Path,
) -> None:
    def before(cluster: Cluster) -> None:
        cluster.put("resourceslices", "a", ours("a", "n0", "r", ["u0", "u1", "u2"]))
        # A pool of two slices of which one is there: kube-scheduler would not use it.
        cluster.put("resourceslices", "b", ours("b", "n1", "r", ["u0"], count=2))

    async def body(s: Setup) -> None:
        assert s.ledger.node("n0").ephemeral == {R: 3}  # type: ignore[union-attr]
        assert s.ledger.node("n1").ephemeral == {}  # type: ignore[union-attr]

    scenario(tmp_path, body, before=before)


def test_drift_is_re_asserted_and_a_follower_mirrors_instead(tmp_path: Path) -> None:
    async def body(s: Setup) -> None:
        s.ledger.set_capacity(R, {"n0": 3})
        assert await s.durable()
        (one,) = s.slices()
        s.cluster.delete("resourceslices", one["metadata"]["name"])
        await settled(s, lambda: s.devices() == ["u0", "u1", "u2"])
        s.leading[0] = False
        (one,) = s.slices()
        s.cluster.put(
            "resourceslices",
            one["metadata"]["name"],
            ours(one["metadata"]["name"], "n0", "r", ["u0"], gen=9),
        )
        await settled(s, lambda: s.ledger.node("n0").ephemeral == {R: 1})  # type: ignore[union-attr]

    scenario(tmp_path, body)


def test_a_removed_resource_takes_its_slices_and_its_class_with_it(tmp_path: Path) -> None:
    async def body(s: Setup) -> None:
        s.ledger.set_capacity(R, {"n0": 3, "n1": 200})
        assert await s.durable()
        s.ledger.set_capacity(R, {"n0": 0})
        assert await s.durable()
        assert s.slices("n0") == [] and len(s.slices("n1")) == 2
        assert "r.escher.io" in s.cluster.kinds["deviceclasses"].objects
        s.ledger.remove_resource(R)
        assert await s.durable()
        assert s.cluster.kinds["resourceslices"].objects == {}
        await settled(s, lambda: "r.escher.io" not in s.cluster.kinds["deviceclasses"].objects)

    scenario(tmp_path, body)


def tainted(s: Setup) -> list[str]:
    """The node's devices that carry the over-capacity taint."""
    return [
        d["name"]
        for x in s.slices()
        for d in x["spec"]["devices"]
        if {"key": "escher.io/over-capacity", "effect": "NoSchedule"} in d.get("taints", [])
    ]


def test_devices_held_above_a_lowered_capacity_are_tainted_until_back_within_it(
    tmp_path: Path,
) -> None:
    """Claims of devices a decrease unpublished arrive after it (kube-scheduler allocated
    them in memory against the old capacity): 4 held where 2 were accepted. Those 4 are
    published tainted NoSchedule, nothing else, each slice carrying the capacity: a device a
    pod releases is still published but kube-scheduler gives it to no waiting pod. Back
    within the capacity, the held devices and free ones up to it are published untainted."""

    async def body(s: Setup) -> None:
        s.ledger.set_capacity(R, {"n0": 10})
        assert await s.durable()
        s.ledger.set_capacity(R, {"n0": 2})
        assert await s.durable()
        for i in (3, 5, 7, 8):
            s.claim(f"c{i}", ("n0/r/0", f"u{i}"))
        await settled(s, lambda: tainted(s) == ["u3", "u5", "u7", "u8"])
        assert s.devices() == ["u3", "u5", "u7", "u8"]
        (one,) = s.slices()
        assert one["metadata"]["labels"]["escher.io/capacity"] == "2"
        s.cluster.delete("resourceclaims", "c3")
        await settled(s, lambda: s.devices() == ["u5", "u7", "u8"])
        assert tainted(s) == ["u5", "u7", "u8"]
        s.cluster.delete("resourceclaims", "c5")
        await settled(s, lambda: s.devices() == ["u7", "u8"] and tainted(s) == [])
        (one,) = s.slices()
        assert "escher.io/capacity" not in one["metadata"]["labels"]
        # Within it: u7 released stays published, free (kube-scheduler may give it to a
        # waiting pod at once; another name in its place would make a third unit).
        s.cluster.delete("resourceclaims", "c7")
        await settled(s, lambda: s.ledger.node("n0").used == {R: 1})  # type: ignore[union-attr]
        s.claim("c9", ("n0/r/0", "u7"))
        await settled(s, lambda: s.ledger.node("n0").used == {R: 2})  # type: ignore[union-attr]
        assert s.devices() == ["u7", "u8"] and tainted(s) == []
        assert s.ledger.node("n0").ephemeral == {R: 2}  # type: ignore[union-attr]

    scenario(tmp_path, body)


def test_a_pool_holding_more_than_a_tainted_slice_can_keeps_64_tainted(tmp_path: Path) -> None:
    """A slice with a tainted device holds at most 64 devices: above the capacity, a pool
    holding 70 publishes its 64 lowest, tainted, and the other 6 stay unpublished (not
    allocatable either way) until the node is back within its capacity."""

    async def body(s: Setup) -> None:
        s.ledger.set_capacity(R, {"n0": 100})
        assert await s.durable()
        s.ledger.set_capacity(R, {"n0": 69})
        assert await s.durable()
        for i in range(70):
            s.claim(f"c{i}", ("n0/r/0", f"u{i}"))
        await settled(s, lambda: len(tainted(s)) == 64)
        assert s.devices() == [f"u{i}" for i in range(64)]
        s.cluster.delete("resourceclaims", "c0")
        await settled(s, lambda: len(s.devices()) == 69 and tainted(s) == [])

    scenario(tmp_path, body)


def test_a_tainted_slice_is_adopted_as_the_capacity_it_carries_and_pools_add_up(
    tmp_path: Path,
) -> None:
    """A restarted replica, or a follower, takes a node's capacity from its slices: the
    devices of all its pools, or the capacity a tainted slice carries (its devices are the
    held ones)."""

    def before(cluster: Cluster) -> None:
        over = ours("a", "n0", "r", ["u3", "u5"])
        over["metadata"]["labels"]["escher.io/capacity"] = "1"
        for d in over["spec"]["devices"]:
            d["taints"] = [{"key": "escher.io/over-capacity", "effect": "NoSchedule"}]
        cluster.put("resourceslices", "a", over)
        wide = ours("b", "n1", "r", [f"u{i}" for i in range(128)])
        more = ours("c", "n1", "r", ["u128", "u129"])
        more["spec"]["pool"]["name"] = pool_name("n1", "r", 1)
        cluster.put("resourceslices", "b", wide)
        cluster.put("resourceslices", "c", more)

    async def body(s: Setup) -> None:
        assert s.ledger.node("n0").ephemeral == {R: 1}  # type: ignore[union-attr]
        assert s.ledger.node("n1").ephemeral == {R: 130}  # type: ignore[union-attr]

    scenario(tmp_path, body, before=before)


def test_an_api_server_that_drops_taints_gets_the_held_devices_untainted_once(
    tmp_path: Path,
) -> None:
    """DRADeviceTaints off: the API server drops the field on write. The publisher notices
    from the slice it gets back, logs it, and publishes the held devices untainted (with the
    capacity label) instead of rewriting the taints forever."""

    async def body(s: Setup) -> None:
        api = s.publisher._api
        send = api.request

        async def without_taints(method: str, path: str, **kw: Any) -> bytes:
            if method in ("PUT", "POST") and "resourceslices" in path:
                obj = json.loads(kw["body"])
                for d in obj["spec"]["devices"]:
                    d.pop("taints", None)
                kw["body"] = json.dumps(obj).encode()
            return await send(method, path, **kw)

        api.request = without_taints  # type: ignore[method-assign]
        s.ledger.set_capacity(R, {"n0": 10})
        assert await s.durable()
        s.ledger.set_capacity(R, {"n0": 2})
        assert await s.durable()
        for i in (3, 5, 7):
            s.claim(f"c{i}", ("n0/r/0", f"u{i}"))
        await settled(s, lambda: s.devices() == ["u3", "u5", "u7"])
        assert tainted(s) == [] and not s.publisher._taints
        writes = len([r for r in s.cluster.requests if r.method in ("POST", "PUT")])
        await asyncio.sleep(0.3)  # the coalescing and backoff several times over
        assert len([r for r in s.cluster.requests if r.method in ("POST", "PUT")]) == writes
        (one,) = s.slices()
        assert one["metadata"]["labels"]["escher.io/capacity"] == "2"

    scenario(tmp_path, body)


@pytest.mark.parametrize(
    ("count", "held", "want"),
    [
        (3, ["u1"], {0: Want(("u0", "u1", "u2"))}),
        (2, ["u5", "u9"], {0: Want(("u5", "u9"))}),
        (1, ["u5", "u200"], {0: Want(("u5",), True, 1), 1: Want(("u200",), True, 1)}),
        (0, ["u5"], {}),  # removed: nothing published
    ],
)
def test_publication(count: int, held: list[str], want: dict[int, Want]) -> None:
    assert publication(count, held) == want
    untainted = publication(count, held, taints=False)
    assert all(not w.tainted for w in untainted.values())
    assert [w.devices for w in untainted.values()] == [w.devices for w in want.values()]


@pytest.mark.parametrize(
    ("count", "allocated", "want"),
    [
        (0, [], []),
        (3, [], ["u0", "u1", "u2"]),
        (3, ["u1"], ["u0", "u1", "u2"]),
        (2, ["u5", "u9"], ["u5", "u9"]),
        (1, ["u5", "u9"], ["u5", "u9"]),  # held devices stay, whatever the count
        (3, ["x"], ["u0", "u1", "x"]),  # a name we would not choose, kept last
    ],
)
def test_device_names(count: int, allocated: list[str], want: list[str]) -> None:
    assert device_names(count, allocated) == want


@pytest.mark.parametrize(
    ("count", "allocated", "shown", "want"),
    [
        (2, ["u3"], ["u3", "u5"], ["u3", "u5"]),  # u5 freed: kept, not swapped for u0
        (2, [], ["u3", "u5", "u9"], ["u3", "u5"]),  # a decrease drops the highest free
        (3, ["u9"], ["u5"], ["u0", "u5", "u9"]),  # an increase adds the lowest new names
    ],
)
def test_device_names_keep_the_free_devices_published(
    count: int, allocated: list[str], shown: list[str], want: list[str]
) -> None:
    assert device_names(count, allocated, shown) == want


@pytest.mark.parametrize(
    ("short", "want"),
    [
        ("slot", "slot"),
        ("gang-a-b", "gang-a-b"),
        ("GPU_slot", "gpu-slot-"),  # + a hash of the real name
        ("a.b", "a-b-"),
    ],
)
def test_dns_name(short: str, want: str) -> None:
    got = dns_name(short)
    assert (
        got == want
        if not want.endswith("-")
        else got.startswith(want) and len(got) == len(want) + 8
    )
    assert dns_name("GPU_slot") != dns_name("gpu-slot")
