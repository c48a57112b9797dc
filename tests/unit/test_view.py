"""ClusterView against a fake API server at the HTTP boundary: paginated lists, watch streams."""

from __future__ import annotations

import copy
import json
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import urllib3
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.rest import RESTResponse

from extender.adapters import view as view_mod
from extender.adapters.view import ClusterView, RebuildError
from extender.ledger import HolderKind, Ledger
from extender.metrics import Metrics
from extender.settings import Settings

D = "escher.io"
END = object()  # a watch item: the server closes the stream


def node(
    name: str,
    owned: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    **extra: str,
) -> dict[str, Any]:
    res = {"cpu": "4", "memory": "1Gi", "pods": "110", **extra, **(owned or {})}
    return {
        "metadata": {"name": name, "labels": labels or {}, "resourceVersion": "1"},
        "status": {"capacity": dict(res), "allocatable": dict(res)},
    }


def pod(
    uid: str,
    node: str | None = "n1",
    phase: str = "Running",
    limits: dict[str, str] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"pod-{uid}",
        "namespace": "ns",
        "uid": uid,
        "resourceVersion": "1",
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": limits or {}}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


class FakeStream:
    """A watch response: newline-delimited JSON events, fed by the test through a queue."""

    def __init__(self, q: queue.Queue[Any]) -> None:
        self.status = 200
        self.reason = "OK"
        self.headers: dict[str, str] = {}
        self.q = q
        self.down = threading.Event()

    def stream(self, amt: Any = None, decode_content: bool = True) -> Iterator[bytes]:
        while True:
            if self.down.is_set():
                raise urllib3.exceptions.ProtocolError("connection shut down")
            try:
                item = self.q.get(timeout=0.01)
            except queue.Empty:
                continue
            if item is END:
                return
            line = json.dumps(item).encode() + b"\n"
            # Split events across chunks, as a real chunked stream may.
            yield line[:7]
            yield line[7:]

    def shutdown(self) -> None:
        self.down.set()

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class FakeList:
    def __init__(self, status: int, obj: Any) -> None:
        self.status = status
        self.reason = "OK" if status < 300 else "Error"
        self.headers = {"content-type": "application/json"}
        self.data = json.dumps(obj).encode()

    def release_conn(self) -> None:
        pass


class FakeCluster:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[str, dict[str, dict[str, Any]]] = {"nodes": {}, "pods": {}}
        self.rv = 100
        self.lists: list[tuple[str, dict[str, str]]] = []
        self.list_times: list[tuple[str, dict[str, str], float]] = []
        self.watches: list[tuple[str, dict[str, str]]] = []
        self.events: dict[str, queue.Queue[Any]] = {"nodes": queue.Queue(), "pods": queue.Queue()}
        self.watch_fail: dict[str, list[int]] = {"nodes": [], "pods": []}
        self.expire_continue = 0

    def put(self, kind: str, obj: dict[str, Any]) -> None:
        key = obj["metadata"]["name"] if kind == "nodes" else obj["metadata"]["uid"]
        with self.lock:
            self.rv += 1
            self.objects[kind][key] = copy.deepcopy(obj)

    def delete(self, kind: str, key: str) -> None:
        with self.lock:
            self.rv += 1
            del self.objects[kind][key]

    def emit(self, kind: str, typ: str, obj: Any) -> None:
        self.events[kind].put({"type": typ, "object": obj})

    def request(
        self,
        method: str,
        url: str,
        headers: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> RESTResponse:
        u = urlsplit(url)
        q = {k: v[0] for k, v in parse_qs(u.query, keep_blank_values=True).items()}
        kind = {"/api/v1/nodes": "nodes", "/api/v1/pods": "pods"}[u.path]
        if q.get("watch") == "true":
            with self.lock:
                self.watches.append((kind, q))
                fail = self.watch_fail[kind].pop(0) if self.watch_fail[kind] else None
            if fail is not None:
                return RESTResponse(FakeList(fail, {"kind": "Status", "code": fail}))
            return RESTResponse(FakeStream(self.events[kind]))
        with self.lock:
            self.lists.append((kind, q))
            self.list_times.append((kind, q, time.monotonic()))
            if "continue" in q and self.expire_continue:
                self.expire_continue -= 1
                return RESTResponse(FakeList(410, {"kind": "Status", "code": 410}))
            items = sorted(self.objects[kind].values(), key=lambda o: o["metadata"]["name"])
            start = int(q.get("continue", "0"))
            limit = int(q.get("limit", "0")) or len(items)
            page = items[start : start + limit]
            meta: dict[str, str] = {"resourceVersion": str(self.rv)}
            if start + limit < len(items):
                meta["continue"] = str(start + limit)
            return RESTResponse(FakeList(200, {"metadata": meta, "items": page}))


class Harness:
    def __init__(self) -> None:
        self.server = FakeCluster()
        self.ledger = Ledger(D)
        self.metrics = Metrics()
        self.drifts: list[str] = []
        api = ApiClient(Configuration(host="http://apiserver.invalid"))
        api.rest_client = self.server
        self.view = ClusterView(
            api, self.ledger, Settings(), self.metrics, on_node_drift=self.drifts.append
        )
        self._seq = 0

    def restarts(self, resource: str, reason: str) -> float:
        return (
            self.metrics.registry.get_sample_value(
                "escher_watch_restarts_total", {"resource": resource, "reason": reason}
            )
            or 0.0
        )

    def sync(self, kind: str) -> None:
        """Wait until every event emitted so far on `kind` was handled (events are in order)."""
        self._seq += 1
        if kind == "nodes":
            name = f"sentinel-{self._seq}"
            self.server.emit("nodes", "ADDED", node(name))
            wait_for(lambda: self.ledger.node(name) is not None)
            self.ledger.remove_node(name)
        else:
            uid = f"sentinel-{self._seq}"
            self.server.emit("pods", "ADDED", pod(uid))
            wait_for(lambda: self.ledger.holding(uid) is not None)
            self.ledger.release(uid)


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.view.stop(timeout=2)


def wait_for(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def held(h: Harness, uid: str) -> HolderKind | None:
    x = h.ledger.holding(uid)
    return None if x is None else x.kind


# ---- rebuild -------------------------------------------------------------------------------


def test_rebuild_fills_the_ledger_from_paginated_lists(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(view_mod, "_PAGE_SIZE", 2)
    for i in range(5):
        owned = {f"{D}/g": str(i + 1)} if i % 2 == 0 else {}
        h.server.put("nodes", node(f"n{i}", owned, {"zone": f"z{i}"}, **{"example.com/gpu": "2"}))
    h.server.put("pods", pod("a", "n0", limits={f"{D}/g": "1", "cpu": "500m"}))
    h.server.put("pods", pod("b", "n2", phase="Pending"))  # bound, not started: holds
    h.server.put("pods", pod("c", "n2", deleting=True))  # terminating: still holds
    h.server.put("pods", pod("d", None))  # unbound: nothing
    h.server.put("pods", pod("e", "n4", phase="Succeeded"))  # done: nothing
    h.view.rebuild()

    assert h.view.synced.is_set()
    snap = h.ledger.snapshot()
    assert sorted(snap.nodes) == [f"n{i}" for i in range(5)]
    n0 = snap.nodes["n0"]
    assert n0.ephemeral == {f"{D}/g": 1}
    assert n0.physical == {"cpu": 4000, "memory": 2**30, "pods": 110, "example.com/gpu": 2}
    assert n0.labels == {"zone": "z0"}
    assert snap.nodes["n1"].ephemeral == {}
    assert snap.nodes["n4"].ephemeral == {f"{D}/g": 5}
    assert sorted(snap.holdings) == ["a", "b", "c"]
    assert snap.holdings["a"].amounts == {f"{D}/g": 1, "cpu": 500, "pods": 1}
    assert snap.holdings["a"].kind is HolderKind.POD
    assert n0.used == {f"{D}/g": 1, "cpu": 500, "pods": 1}
    # Pagination: pages of 2, continued with the server's token.
    node_lists = [q for kind, q in h.server.lists if kind == "nodes"]
    assert [q.get("continue") for q in node_lists] == [None, "2", "4"]
    assert all(q["limit"] == "2" for q in node_lists)
    pod_lists = [q for kind, q in h.server.lists if kind == "pods"]
    assert pod_lists[0]["fieldSelector"] == (
        "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
    )
    assert h.drifts == []  # the rebuild takes the nodes' values: nothing to re-assert


def test_rebuild_restarts_a_list_whose_continue_token_expired(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(view_mod, "_PAGE_SIZE", 2)
    for i in range(3):
        h.server.put("nodes", node(f"n{i}"))
    h.server.expire_continue = 1
    h.view.rebuild()
    assert sorted(h.ledger.node_names()) == ["n0", "n1", "n2"]
    node_lists = [q.get("continue") for kind, q in h.server.lists if kind == "nodes"]
    assert node_lists == [None, "2", None, "2"]


def test_rebuild_skips_malformed_objects(h: Harness) -> None:
    h.server.put("nodes", node("good"))
    h.server.put("nodes", node("bad-quantity", **{"example.com/x": "lots"}))
    bad_labels = node("bad-labels")
    bad_labels["metadata"]["labels"] = {"a": 1}
    h.server.put("nodes", bad_labels)
    no_status = node("no-status")
    del no_status["status"]
    h.server.put("nodes", no_status)
    h.server.put("pods", pod("ok", "good"))
    h.server.put("pods", pod("bad-limits", "good", limits={"cpu": "a lot"}))
    broken = pod("bad-spec", "good")
    broken["spec"]["containers"] = "nope"
    h.server.put("pods", broken)
    h.view.rebuild()
    assert sorted(h.ledger.node_names()) == ["good", "no-status"]
    assert sorted(h.ledger.snapshot().holdings) == ["ok"]


def test_a_failed_rebuild_is_counted_and_explained_in_one_line(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    status = {"kind": "Status", "code": 401, "message": "Unauthorized"}
    monkeypatch.setattr(h.server, "request", lambda *a, **k: RESTResponse(FakeList(401, status)))
    with pytest.raises(RebuildError, match=r"^unauthorized: HTTP 401 Error: Unauthorized$"):
        h.view.rebuild()
    assert not h.view.synced.is_set()
    failures = h.metrics.registry.get_sample_value(
        "escher_ledger_rebuild_failures_total", {"reason": "unauthorized"}
    )
    assert failures == 1


def test_start_needs_a_rebuild(h: Harness) -> None:
    with pytest.raises(RuntimeError):
        h.view.start()
    assert not h.view.synced.is_set()


# ---- watching ------------------------------------------------------------------------------


def started(h: Harness) -> Harness:
    h.server.put("nodes", node("n1", {f"{D}/g": "2"}))
    h.server.put("pods", pod("p1", "n1", limits={f"{D}/g": "1"}))
    h.view.rebuild()
    h.view.start()
    return h


def test_watches_resume_from_the_list_with_bookmarks(h: Harness) -> None:
    started(h)
    wait_for(lambda: len(h.server.watches) == 2)
    by_kind = dict(h.server.watches)
    for kind in ("nodes", "pods"):
        q = by_kind[kind]
        assert q["resourceVersion"] == "102"
        assert q["allowWatchBookmarks"] == "true"
        assert int(q["timeoutSeconds"]) > 0
    assert by_kind["pods"]["fieldSelector"] == view_mod._POD_SELECTOR
    h.server.emit("nodes", "BOOKMARK", {"kind": "Node", "metadata": {"resourceVersion": "150"}})
    h.server.events["nodes"].put(END)
    wait_for(lambda: len([k for k, _ in h.server.watches if k == "nodes"]) == 2)
    assert h.server.watches[-1][1]["resourceVersion"] == "150"
    assert h.restarts("nodes", "closed") == 1  # ended at once: counted, and backed off
    assert len(h.server.lists) == 2  # resumed, not re-listed


# (events on pod p, then the expected holding kind of p; None = not held)
POD_CASES = [
    ("bound", [("ADDED", pod("p", "n1"))], HolderKind.POD),
    ("succeeded", [("ADDED", pod("p", "n1")), ("MODIFIED", pod("p", "n1", "Succeeded"))], None),
    ("failed", [("ADDED", pod("p", "n1")), ("MODIFIED", pod("p", "n1", "Failed"))], None),
    ("deleted", [("ADDED", pod("p", "n1")), ("DELETED", pod("p", "n1"))], None),
    (
        "terminating",
        [("ADDED", pod("p", "n1")), ("MODIFIED", pod("p", "n1", deleting=True))],
        HolderKind.POD,
    ),
    ("unbound-keeps-assumed", [("MODIFIED", pod("p", None))], HolderKind.ASSUMED),
    ("unbound-pending-keeps-assumed", [("ADDED", pod("p", None, "Pending"))], HolderKind.ASSUMED),
    ("bound-replaces-assumed", [("MODIFIED", pod("p", "n1"))], HolderKind.POD),
    ("deleted-releases-assumed", [("DELETED", pod("p", None))], None),
    (
        "malformed-ignored",
        [("MODIFIED", {"metadata": {"uid": "p"}, "spec": [], "status": 1})],
        HolderKind.ASSUMED,
    ),
]


@pytest.mark.parametrize(
    ("events", "expected"), [c[1:] for c in POD_CASES], ids=[c[0] for c in POD_CASES]
)
def test_pod_events(h: Harness, events: list[tuple[str, Any]], expected: HolderKind | None) -> None:
    started(h)
    assert h.ledger.hold("p", "n1", {f"{D}/g": 1}) is None  # an extender bind in flight
    for typ, obj in events:
        h.server.emit("pods", typ, obj)
    h.sync("pods")
    assert held(h, "p") is expected
    assert held(h, "p1") is HolderKind.POD  # others untouched


def test_node_events(h: Harness) -> None:
    started(h)
    h.ledger.set_capacity(f"{D}/g", {"n1": 3})  # the ledger is ahead of the node
    # A label change: recorded, the ledger's ephemeral capacity stands, and the node's
    # (older) value of the resource is reported as drift.
    h.server.emit("nodes", "MODIFIED", node("n1", {f"{D}/g": "2"}, {"zone": "b"}, cpu="8"))
    h.sync("nodes")
    n1 = h.ledger.node("n1")
    assert n1 is not None
    assert n1.labels == {"zone": "b"} and n1.physical["cpu"] == 8000
    assert n1.ephemeral == {f"{D}/g": 3}
    assert h.drifts == ["n1"]
    # In step: no drift.
    h.server.emit("nodes", "MODIFIED", node("n1", {f"{D}/g": "3"}, {"zone": "c"}))
    # Allocatable right, capacity reset by someone: drift (both are written).
    half = node("n1", {f"{D}/g": "3"})
    del half["status"]["capacity"][f"{D}/g"]
    h.server.emit("nodes", "MODIFIED", half)
    # A new node arriving with a stale resource of ours: the ledger has none, so drift.
    h.server.emit("nodes", "ADDED", node("n2", {f"{D}/old": "1"}))
    h.sync("nodes")
    assert h.drifts == ["n1", "n1", "n2"]
    n2 = h.ledger.node("n2")
    assert n2 is not None and n2.ephemeral == {}
    h.server.emit("nodes", "DELETED", node("n2"))
    h.server.emit("nodes", "MODIFIED", {"metadata": {}})  # malformed: skipped
    h.sync("nodes")
    assert sorted(h.ledger.node_names()) == ["n1"]
    assert held(h, "p1") is HolderKind.POD


@pytest.mark.parametrize("how", ["error-event", "http-410"])
def test_410_relists_and_reconciles(h: Harness, how: str) -> None:
    started(h)
    h.ledger.upsert_node("gone", {}, {})  # seen earlier, deleted while events were missed
    assert h.ledger.hold("assumed", "n1", {f"{D}/g": 1}) is None  # a bind in flight
    wait_for(lambda: len(h.server.watches) == 2)
    # The cluster changes without the view seeing events.
    h.server.delete("pods", "p1")
    h.server.put("nodes", node("n2"))
    h.server.put("pods", pod("p2", "n2"))
    h.server.put("nodes", node("n3", {f"{D}/stray": "1"}))
    for kind in ("nodes", "pods"):
        if how == "http-410":
            h.server.watch_fail[kind] = [410]  # the next watch request is refused with 410
            h.server.events[kind].put(END)
        else:
            h.server.emit(kind, "ERROR", {"kind": "Status", "code": 410, "reason": "Expired"})
    wait_for(lambda: h.restarts("nodes", "gone") == 1 and h.restarts("pods", "gone") == 1)
    wait_for(lambda: len(h.server.lists) == 4)
    h.sync("nodes")
    h.sync("pods")
    assert sorted(h.ledger.node_names()) == ["n1", "n2", "n3"]
    snap = h.ledger.snapshot()
    assert "p1" not in snap.holdings  # vanished: released
    assert held(h, "p2") is HolderKind.POD  # appeared
    assert held(h, "assumed") is HolderKind.ASSUMED  # the extender's own: kept
    assert h.drifts == ["n3"]
    # Watching resumes from the re-list's resourceVersion.
    last = dict(h.server.watches)
    assert last["nodes"]["resourceVersion"] == last["pods"]["resourceVersion"] == str(h.server.rv)


def test_repeated_410_backs_off(h: Harness) -> None:
    h.server.watch_fail["nodes"] = [410, 410, 410]
    started(h)
    wait_for(lambda: h.restarts("nodes", "gone") == 3 and len(h.server.lists) == 5)
    lists = [t for kind, _, t in h.server.list_times if kind == "nodes"]
    assert len(lists) == 4  # the rebuild, then a re-list per 410
    assert lists[1] - lists[0] < 0.15  # the first 410: at once
    assert lists[2] - lists[1] >= 0.18  # then with backoff (0.2 s, doubling)
    assert lists[3] - lists[2] >= 0.36
    h.server.emit("nodes", "ADDED", node("n9"))
    wait_for(lambda: h.ledger.node("n9") is not None)


def test_watch_errors_back_off_and_resume(h: Harness) -> None:
    h.server.watch_fail["pods"] = [500, 429]
    started(h)
    wait_for(lambda: len([k for k, _ in h.server.watches if k == "pods"]) == 3)
    pods_watches = [q for k, q in h.server.watches if k == "pods"]
    assert [q["resourceVersion"] for q in pods_watches] == ["102"] * 3
    assert h.restarts("pods", "server_error") == 1
    assert h.restarts("pods", "throttled") == 1
    assert h.restarts("nodes", "server_error") == 0
    h.server.emit("pods", "ADDED", pod("p9", "n1"))
    wait_for(lambda: h.ledger.holding("p9") is not None)
    assert len(h.server.lists) == 2  # no re-list for plain errors


def test_malformed_watch_lines_are_skipped(h: Harness) -> None:
    started(h)
    h.server.events["pods"].put("not an event")
    h.server.events["pods"].put({"type": "ADDED"})
    h.server.emit("pods", "ADDED", pod("p9", "n1"))
    wait_for(lambda: h.ledger.holding("p9") is not None)
    assert h.restarts("pods", "error") == 0


def test_stop_ends_the_watches_promptly(h: Harness) -> None:
    started(h)
    wait_for(lambda: len(h.server.watches) == 2)
    t0 = time.monotonic()
    h.view.stop(timeout=2)
    assert time.monotonic() - t0 < 0.5
    assert all(not t.is_alive() for t in h.view._threads)
