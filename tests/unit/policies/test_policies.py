"""Policies kept as objects (extender.policies.kube) over an API server holding the CRDs'
objects (fakeapi.Cluster): the façade's writes and replies, the reconcile loop on objects
others write, finalizers, refusals as conditions, resourceVersion conflicts, ESLs owning
their resource objects, a new leader resuming an ESL from its status, and adoption."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fakeapi import Cluster, connected

from extender.core.errors import Conflict, NoMatch, UnknownNode
from extender.core.ledger import HolderKind, Ledger
from extender.esl.backends import LedgerBackend
from extender.esl.errors import InstanceExists, NoRoom
from extender.esl.registry import Instances
from extender.metrics import Metrics
from extender.policies.api import ResourceSpec
from extender.policies.kube import esls
from extender.policies.kube.objectstore import ObjectStore

D = "escher.io"
NODES = ("n0", "n1", "n2")


@dataclass
class Setup:
    cluster: Cluster
    ledger: Ledger
    store: ObjectStore
    instances: Instances

    def resource(self, name: str) -> dict[str, Any] | None:
        return self.cluster.kinds["ephemeralresources"].objects.get(name)

    def esl(self, name: str) -> dict[str, Any] | None:
        return self.cluster.kinds["esls"].objects.get(name)

    def on_nodes(self, short: str) -> dict[str, int]:
        full = f"{D}/{short}"
        return {
            n: v.ephemeral[full]
            for n, v in self.ledger.snapshot().nodes.items()
            if full in v.ephemeral
        }


def ledger_of(cpu: int = 4) -> Ledger:
    ledger = Ledger(D)
    for i, n in enumerate(NODES):
        ledger.upsert_node(n, {"zone": "a" if i < 2 else "b"}, {"cpu": cpu * 1000, "pods": 110})
    return ledger


async def until(check: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "not reached in time"
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def running(
    tmp_path: Path,
    cluster: Cluster | None = None,
    ledger: Ledger | None = None,
    resync_seconds: float = 0.2,
) -> AsyncIterator[Setup]:
    tmp_path.mkdir(exist_ok=True)
    cluster = cluster or Cluster()
    ledger = ledger or ledger_of()

    async def durable(version: int, nodes: list[str]) -> bool:
        return True

    async with connected(cluster, tmp_path) as api:
        instances = Instances(lambda: LedgerBackend(ledger, D))
        store = ObjectStore(
            api,
            ledger,
            D,
            Metrics(),
            instances,
            lambda claim, release: LedgerBackend(ledger, D, claim=claim, release=release),
            durable,
            lambda: True,
            resync_seconds=resync_seconds,
        )
        await store.sync()
        task = asyncio.create_task(store.run())
        store.leading(True)
        try:
            yield Setup(cluster, ledger, store, instances)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in obj["status"]["conditions"]}


def test_put_writes_the_object_applies_it_and_answers_from_its_status(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running(tmp_path) as s:
            result = await s.store.set_resource(
                "r", ResourceSpec(capacity=2, node_selector={"zone": "a"})
            )
            assert (result.resource, result.nodes, result.durable) == (
                f"{D}/r",
                {"n0": 2, "n1": 2},
                True,
            )
            obj = s.resource("r")
            assert obj is not None
            assert obj["spec"] == {"capacity": 2, "nodeSelector": {"zone": "a"}}
            assert obj["metadata"]["finalizers"] == [f"{D}/teardown"]
            assert conditions(obj) == {
                "Applied": ("True", "Applied"),
                "Durable": ("True", "OnNodes"),
                "Conflict": ("False", "None"),
            }
            assert obj["status"]["nodeCount"] == 2 and obj["status"]["observedGeneration"] == 1
            assert s.on_nodes("r") == {"n0": 2, "n1": 2}
            # A resize is a patch of the same object: its generation moves on.
            await s.store.set_resource("r", ResourceSpec(capacity=3, node="n2"))
            obj = s.resource("r")
            assert obj is not None and obj["metadata"]["generation"] == 2
            assert obj["spec"] == {"capacity": 3, "node": "n2"}
            assert s.on_nodes("r") == {"n0": 2, "n1": 2, "n2": 3}  # set_resource's semantics

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        (ResourceSpec(capacity=1, node="nowhere"), UnknownNode),
        (ResourceSpec(capacity=1, node_selector={"zone": "z"}), NoMatch),
        (ResourceSpec(capacity=1, node="n0"), Conflict),  # below the 2 allocated
    ],
)
def test_a_refused_put_writes_no_object_and_changes_nothing(
    tmp_path: Path, spec: ResourceSpec, error: type[Exception]
) -> None:
    async def scenario() -> None:
        ledger = ledger_of()
        ledger.set_capacity(f"{D}/held", {"n0": 3})
        ledger.hold("p", "n0", {f"{D}/held": 2}, HolderKind.POD)
        async with running(tmp_path, ledger=ledger) as s:
            name = "held" if error is Conflict else "r"
            before = s.ledger.version
            with pytest.raises(error):
                await s.store.set_resource(name, spec)
            assert s.ledger.version == before
            assert s.cluster.sent("POST", f"/apis/{D}/v1alpha1/ephemeralresources") == [] or (
                name == "held"  # adopted at the start: that object, not this change
            )
            if name == "r":
                assert s.resource("r") is None

    asyncio.run(scenario())


def test_an_object_another_writer_made_is_reconciled_and_its_refusal_is_a_condition(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with running(tmp_path) as s:
            s.cluster.put("ephemeralresources", "k", _object("k", {"capacity": 5, "node": "n1"}))
            await until(lambda: s.on_nodes("k") == {"n1": 5})
            await until(lambda: "status" in (s.resource("k") or {}))
            obj = s.resource("k")
            assert obj is not None and f"{D}/teardown" in obj["metadata"]["finalizers"]
            s.cluster.put("ephemeralresources", "bad", _object("bad", {"capacity": 1, "node": "x"}))
            await until(lambda: "status" in (s.resource("bad") or {}))
            bad = s.resource("bad")
            assert bad is not None
            assert conditions(bad)["Applied"] == ("False", "UnknownNode")
            assert "'x'" in bad["status"]["conditions"][0]["message"]
            assert s.on_nodes("bad") == {}

    asyncio.run(scenario())


def test_deleting_an_object_removes_the_resource_then_the_finalizer(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running(tmp_path) as s:
            await s.store.set_resource("r", ResourceSpec(capacity=1))
            assert len(s.on_nodes("r")) == 3
            # kubectl delete: the API server only marks it; the finalizer finishes.
            s.cluster._custom(_delete_request("r"), "ephemeralresources", "r", [])
            await until(lambda: s.resource("r") is None)
            assert s.on_nodes("r") == {}

    asyncio.run(scenario())


def test_delete_through_the_facade_refuses_a_held_resource_without_force(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running(tmp_path) as s:
            await s.store.set_resource("r", ResourceSpec(capacity=2, node="n0"))
            s.ledger.hold("p", "n0", {f"{D}/r": 1}, HolderKind.POD)
            with pytest.raises(Conflict):
                await s.store.delete_resource("r", force=False)
            assert s.resource("r") is not None and s.on_nodes("r") == {"n0": 2}
            result = await s.store.delete_resource("r", force=True)
            assert (result.removed_from, result.durable) == (["n0"], True)
            assert s.resource("r") is None and s.on_nodes("r") == {}

    asyncio.run(scenario())


def test_a_status_whose_usage_alone_moved_is_rewritten_at_the_resync_not_at_each_event(
    tmp_path: Path,
) -> None:
    """The status's own write comes back as an event; while pods are placed its usage has
    always moved by then. Rewriting at each event made every write call for the next."""

    async def scenario() -> None:
        async with running(tmp_path, resync_seconds=3600) as s:
            await s.store.set_resource("r", ResourceSpec(capacity=2, node="n0"))
            path = f"/apis/{D}/v1alpha1/ephemeralresources/r/status"
            await until(lambda: s.store.resources.cache["r"].status.observed_generation == 1)
            writes = len(s.cluster.sent("PATCH", path))
            s.ledger.hold("p", "n0", {f"{D}/r": 1}, HolderKind.POD)
            s.store.resources.queue("r")  # an event: the status's own write coming back
            await asyncio.sleep(0.3)
            obj = s.resource("r")
            assert obj is not None and obj["status"]["allocated"] == 0
            assert len(s.cluster.sent("PATCH", path)) == writes
            s.store.resources.everything()  # the resync
            await until(lambda: s.resource("r")["status"]["allocated"] == 1)  # type: ignore[index]
            assert len(s.cluster.sent("PATCH", path)) == writes + 1
            # A change of more than its usage is written at once.
            await s.store.set_resource("r", ResourceSpec(capacity=3, node="n0"))
            obj = s.resource("r")
            assert obj is not None and obj["status"]["observedGeneration"] == 2

    asyncio.run(scenario())


def test_a_write_over_a_newer_version_is_a_clear_409_and_changes_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running(tmp_path) as s:
            await s.store.set_resource("r", ResourceSpec(capacity=2, node="n0"))
            s.cluster.fail("PATCH", f"/apis/{D}/v1alpha1/ephemeralresources/r", 409)
            with pytest.raises(Conflict, match="another writer"):
                await s.store.set_resource("r", ResourceSpec(capacity=9, node="n0"))
            assert s.on_nodes("r") == {"n0": 2}
            obj = s.resource("r")
            assert obj is not None and obj["spec"]["capacity"] == 2

    asyncio.run(scenario())


def test_a_delete_at_an_older_version_is_a_clear_409_and_removes_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running(tmp_path) as s:
            await s.store.set_resource("r", ResourceSpec(capacity=2, node="n0"))
            read = (s.resource("r") or {})["metadata"]["resourceVersion"]
            await s.store.set_resource("r", ResourceSpec(capacity=3, node="n0"))
            with pytest.raises(Conflict, match=f"resourceVersion {read}"):
                await s.store.delete_resource("r", force=False, resource_version=read)
            assert s.on_nodes("r") == {"n0": 3} and s.resource("r") is not None
            with pytest.raises(Conflict, match="has no EphemeralResource object"):
                await s.store.delete_resource("absent", force=False, resource_version="1")
            now = (s.resource("r") or {})["metadata"]["resourceVersion"]
            await s.store.delete_resource("r", force=False, resource_version=now)
            assert s.on_nodes("r") == {}

    asyncio.run(scenario())


def test_an_esl_owns_its_resource_objects_and_its_deletion_removes_them(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running(tmp_path) as s:
            applied = await s.store.create_esl("colocation", {"name": "web", "groups": {"a": 2}})
            assert applied.instance.id == "colocation-web"
            owned = s.resource("coloc-web-a")
            assert owned is not None
            assert owned["metadata"]["ownerReferences"][0]["name"] == "web"
            assert "finalizers" not in owned["metadata"]  # the ESL removes it
            esl = s.esl("web")
            assert esl is not None
            assert conditions(esl)["Ready"] == ("True", "Applied")
            assert esl["status"]["resources"] == [f"{D}/coloc-web-a"]
            assert esl["status"]["state"]["created"] == ["coloc-web-a"]
            # Resource objects an ESL owns are not the policy API's to change.
            with pytest.raises(Conflict, match="belongs to ESL web"):
                await s.store.set_resource("coloc-web-a", ResourceSpec(capacity=9))
            with pytest.raises(InstanceExists):
                await s.store.create_esl("gang", {"name": "web", "members": 2})
            await s.store.delete_esl("colocation-web")
            assert s.esl("web") is None and s.resource("coloc-web-a") is None
            assert s.on_nodes("coloc-web-a") == {}

    asyncio.run(scenario())


def test_an_esl_that_cannot_be_applied_leaves_no_object(tmp_path: Path) -> None:
    async def scenario() -> None:
        ledger = ledger_of()
        for n in NODES:
            ledger.hold(f"p-{n}", n, {"pods": 109}, HolderKind.POD)  # one pod's room left
        async with running(tmp_path, ledger=ledger) as s:
            with pytest.raises(NoRoom):
                await s.store.create_esl("colocation", {"name": "big", "groups": {"a": 5}})
            assert s.esl("big") is None and s.resource("coloc-big-a") is None

    asyncio.run(scenario())


def test_a_new_leader_resumes_an_esl_from_its_status_without_a_second_resource(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        cluster, ledger = Cluster(), ledger_of()
        async with running(tmp_path, cluster, ledger) as s:
            await s.store.create_esl("sequencing", {"name": "etl", "stages": ["x", "y", "z"]})
            await s.store.signal_esl("sequencing-etl", "x")
            assert s.on_nodes("seq-etl-y")
            state = (s.esl("etl") or {})["status"]["state"]
            assert state["opened"] == ["x", "y"] and state["finished"] == ["x"]
        # Another replica, same cluster and nodes: it resumes the instance from the object.
        async with running(tmp_path / "2", cluster, ledger) as s2:
            await until(lambda: len(s2.instances) == 1)
            inst = s2.instances.get("sequencing-etl")
            assert inst.esl.resources() == [f"{D}/seq-etl-y"]
            applied = await s2.store.signal_esl("sequencing-etl", "y")
            assert [c.resource for c in applied.instance.last_changes] == [
                f"{D}/seq-etl-y",
                f"{D}/seq-etl-z",
            ]
            assert s2.on_nodes("seq-etl-x") == {} and s2.on_nodes("seq-etl-y") == {}
            assert s2.resource("seq-etl-y") is None and s2.resource("seq-etl-z") is not None

    asyncio.run(scenario())


def test_a_resource_claimed_but_not_in_the_state_is_removed_on_resume(tmp_path: Path) -> None:
    async def scenario() -> None:
        cluster, ledger = Cluster(), ledger_of()
        async with running(tmp_path, cluster, ledger) as s:
            await s.store.create_esl("colocation", {"name": "web", "groups": {"a": 1}})
        # As when a leader died after claiming and setting a resource, before its status.
        owner = cluster.kinds["esls"].objects["web"]
        stray = _object("coloc-web-b", {"capacity": 1, "node": "n2"})
        stray["metadata"]["ownerReferences"] = [
            {"kind": "ESL", "name": "web", "uid": owner["metadata"]["uid"], "controller": True}
        ]
        cluster.put("ephemeralresources", "coloc-web-b", stray)
        ledger.set_capacity(f"{D}/coloc-web-b", {"n2": 1})
        async with running(tmp_path / "2", cluster, ledger) as s2:
            await until(lambda: s2.resource("coloc-web-b") is None)
            assert s2.on_nodes("coloc-web-b") == {}
            assert s2.instances.get("colocation-web").esl.resources() == [f"{D}/coloc-web-a"]

    asyncio.run(scenario())


def test_resources_only_on_the_nodes_are_adopted_as_objects(tmp_path: Path) -> None:
    async def scenario() -> None:
        ledger = ledger_of()
        ledger.set_capacity(f"{D}/old", {"n0": 4})
        ledger.set_capacity(f"{D}/everywhere", dict.fromkeys(NODES, 2))
        ledger.set_capacity(f"{D}/Upper_case", {"n0": 1})  # no object can be named so
        async with running(tmp_path, ledger=ledger) as s:
            await until(lambda: s.resource("old") and s.resource("everywhere"))
            old, every = s.resource("old"), s.resource("everywhere")
            assert old is not None and every is not None
            assert old["spec"] == {"capacity": 4, "node": "n0"}
            assert every["spec"] == {"capacity": 2}
            await until(lambda: "status" in (s.resource("old") or {}))
            assert conditions(s.resource("old") or {})["Applied"] == ("True", "Adopted")
            assert s.on_nodes("old") == {"n0": 4}  # adopting changes nothing
            assert s.on_nodes("Upper_case") == {"n0": 1}
            # Such a name stays reachable through the façade's delete.
            await s.store.delete_resource("Upper_case", force=False)
            assert s.on_nodes("Upper_case") == {}

    asyncio.run(scenario())


def _object(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{D}/v1alpha1",
        "kind": "EphemeralResource",
        "metadata": {"name": name, "uid": f"uid-{name}", "generation": 1},
        "spec": spec,
    }


def _delete_request(name: str) -> Any:
    import httpx

    return httpx.Request("DELETE", f"http://x/apis/{D}/v1alpha1/ephemeralresources/{name}")


def test_a_name_deleted_through_the_facade_can_be_set_again_at_once(tmp_path: Path) -> None:
    """A pure gang's retry deletes its resource and sets it again right away."""

    async def scenario() -> None:
        async with running(tmp_path) as s:
            for capacity in (1, 2, 3):
                await s.store.set_resource("again", ResourceSpec(capacity=capacity, node="n0"))
                await s.store.delete_resource("again", force=True)
            assert s.resource("again") is None and s.on_nodes("again") == {}

    asyncio.run(scenario())


def test_a_status_the_api_server_drops_leaves_the_answer_to_the_nodes(tmp_path: Path) -> None:
    # The object was written and applied; its status write goes unanswered (an API server
    # paused right then). The caller gets the change's answer, not a 500 after the client's
    # timeout, and the reconcile loop writes the status afterwards.
    async def scenario() -> None:
        async with running(tmp_path) as s:
            s.cluster.fail("PATCH", f"/apis/{D}/v1alpha1/ephemeralresources/r/status", 0)
            result = await s.store.set_resource("r", ResourceSpec(capacity=2, node="n0"))
            assert result.durable and result.nodes == {"n0": 2}
            assert s.on_nodes("r") == {"n0": 2}

            def written() -> bool:
                obj = s.resource("r")
                return obj is not None and obj.get("status", {}).get("observedGeneration") == 1

            await until(written)

    asyncio.run(scenario())


@pytest.mark.parametrize("call", ["create", "signal"])
def test_an_esl_status_the_api_server_holds_leaves_the_answer_to_the_esl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    # As for resources: the ESL is applied and its object written; only its status write
    # hangs (an API server paused right then). The caller gets the ESL's answer within the
    # write bound, not an error after the client's 30 s, and the reconcile loop writes the
    # status once the API server answers again.
    monkeypatch.setattr(esls, "WRITE_SECONDS", 0.2)
    status = f"/apis/{D}/v1alpha1/esls/etl/status"

    async def scenario() -> None:
        async with running(tmp_path) as s:
            body = {"name": "etl", "stages": ["x", "y"]}
            opened = ["x"]
            if call == "signal":
                await s.store.create_esl("sequencing", body)
                opened = ["x", "y"]
            paused = s.cluster.hold[status] = asyncio.Event()
            async with asyncio.timeout(10):  # well below the client's 30 s
                if call == "signal":
                    await s.store.signal_esl("sequencing-etl", "x")
                else:
                    await s.store.create_esl("sequencing", body)
            assert s.on_nodes(f"seq-etl-{opened[-1]}")
            paused.set()

            def written() -> bool:
                state = (s.esl("etl") or {}).get("status", {}).get("state") or {}
                return bool(state.get("opened") == opened)

            await until(written, timeout=10)

    asyncio.run(scenario())
