"""WriteBack against a fake API server at the HTTP boundary (the real client builds requests)."""

from __future__ import annotations

import copy
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import urllib3
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException
from kubernetes.client.rest import RESTResponse

from extender.adapters.writeback import WriteBack, failure_reason, patch_body
from extender.ledger import Ledger
from extender.metrics import Metrics
from extender.settings import Settings

D = "escher.io"
FOREIGN = {"cpu": "32", "memory": "128Gi", "pods": "110", "example.com/gpu": "4"}


class FakeResponse:
    def __init__(self, status: int, obj: Any) -> None:
        self.status = status
        self.reason = "OK" if status < 300 else "Error"
        self.headers = {"content-type": "application/json"}
        self.data = json.dumps(obj).encode()

    def release_conn(self) -> None:
        pass


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386, as the API server applies application/merge-patch+json."""
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            _merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)


class FakeNodes:
    """nodes/status GET and PATCH, with failures to inject and every request recorded."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.nodes: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, dict[str, str], Any, float]] = []
        self.fail: list[int | Exception] = []  # consumed one per PATCH
        self.fail_always: int | Exception | None = None
        self.on_patch: Callable[[str], None] | None = None
        # Runs once the patch is applied and its reply taken: another writer acting "just after".
        self.after_patch: Callable[[str], None] | None = None
        self.in_flight = 0
        self.max_in_flight = 0

    def add(self, name: str, owned: dict[str, str]) -> None:
        res = {**FOREIGN, **owned}
        self.nodes[name] = {
            "metadata": {"name": name},
            "status": {"capacity": dict(res), "allocatable": dict(res)},
        }

    def owned(self, name: str) -> tuple[dict[str, str], dict[str, str]]:
        st = self.nodes[name]["status"]
        pick = lambda m: {k: v for k, v in m.items() if k.startswith(D + "/")}  # noqa: E731
        return pick(st["capacity"]), pick(st["allocatable"])

    def patches(self, node: str | None = None) -> list[Any]:
        return [
            r[3]
            for r in self.requests
            if r[0] == "PATCH" and (node is None or r[1] == f"/api/v1/nodes/{node}/status")
        ]

    def gets(self) -> list[str]:
        return [r[1] for r in self.requests if r[0] == "GET"]

    def request(
        self,
        method: str,
        url: str,
        headers: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> RESTResponse:
        path = urlsplit(url).path
        with self.lock:
            self.requests.append((method, path, dict(headers or {}), body, time.monotonic()))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return RESTResponse(self._serve(method, path, body))
        finally:
            with self.lock:
                self.in_flight -= 1

    def _serve(self, method: str, path: str, body: Any) -> FakeResponse:
        name = path.split("/")[4]
        if method == "PATCH":
            if self.on_patch is not None:
                self.on_patch(name)
            with self.lock:
                failure = self.fail.pop(0) if self.fail else self.fail_always
            if isinstance(failure, Exception):
                raise failure
            if failure is not None:
                return FakeResponse(failure, {"kind": "Status", "code": failure})
        with self.lock:
            node = self.nodes.get(name)
            if node is None:
                return FakeResponse(404, {"kind": "Status", "code": 404})
            if method == "PATCH":
                _merge(node, body)
            reply = FakeResponse(200, copy.deepcopy(node))
        if method == "PATCH" and self.after_patch is not None:
            self.after_patch(name)
        return reply


class Harness:
    def __init__(self, settings: Settings) -> None:
        self.server = FakeNodes()
        self.ledger = Ledger(D)
        self.metrics = Metrics()
        api = ApiClient(Configuration(host="http://apiserver.invalid"))
        api.rest_client = self.server
        self.wb = WriteBack(api, self.ledger, settings, self.metrics)

    def node(self, name: str, owned: dict[str, int] | None = None) -> None:
        """A node as after a rebuild: the same owned resources in the ledger and on the node."""
        owned = owned or {}
        self.server.add(name, {k: str(v) for k, v in owned.items()})
        self.ledger.upsert_node(name, {}, {"cpu": 32000}, owned)

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float:
        return self.metrics.registry.get_sample_value(name, labels or {}) or 0.0


@pytest.fixture
def make() -> Iterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def _make(**overrides: Any) -> Harness:
        s = {
            "writeback_coalesce_seconds": 0.0,
            "writeback_backoff_initial_seconds": 0.02,
            "writeback_backoff_max_seconds": 0.05,
            **overrides,
        }
        h = Harness(Settings(**s))
        made.append(h)
        return h

    yield _make
    for h in made:
        h.wb.stop(timeout=2)


def wait_for(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


# ---- the patch itself --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "desired", "expected"),
    [
        ({}, {}, None),
        ({"escher.io/a": 1}, {"escher.io/a": 1}, None),
        ({}, {"escher.io/a": 2}, {"escher.io/a": "2"}),
        ({"escher.io/a": 1}, {"escher.io/a": 3}, {"escher.io/a": "3"}),
        ({"escher.io/a": 1, "escher.io/b": 2}, {"escher.io/b": 2}, {"escher.io/a": None}),
        (
            {"escher.io/a": 1, "escher.io/b": 2},
            {"escher.io/b": 5, "escher.io/c": 1},
            {"escher.io/a": None, "escher.io/b": "5", "escher.io/c": "1"},
        ),
        # -1 marks a key whose capacity and allocatable disagree on the node: rewrite it.
        ({"escher.io/a": -1}, {"escher.io/a": 1}, {"escher.io/a": "1"}),
    ],
    ids=["nothing", "unchanged", "add", "change", "remove", "mixed", "disagreeing"],
)
def test_patch_body(
    base: dict[str, int], desired: dict[str, int], expected: dict[str, str | None] | None
) -> None:
    body = patch_body(base, desired)
    if expected is None:
        assert body is None
    else:
        assert body == {"status": {"capacity": expected, "allocatable": expected}}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda led: led.set_capacity("escher.io/new", {"n1": 2}), {"escher.io/new": "2"}),
        (lambda led: led.set_capacity("escher.io/a", {"n1": 7}), {"escher.io/a": "7"}),
        (lambda led: led.set_capacity("escher.io/a", {"n1": 0}), {"escher.io/a": None}),
        (lambda led: led.remove_resource("escher.io/b"), {"escher.io/b": None}),
    ],
    ids=["add", "change", "zero-removes", "remove-resource"],
)
def test_request_is_a_merge_patch_of_status_naming_only_changed_owned_keys(
    make: Callable[..., Harness], change: Callable[[Ledger], Any], expected: dict[str, Any]
) -> None:
    h = make()
    h.node("n1", {"escher.io/a": 1, "escher.io/b": 3})
    h.wb.start()
    change(h.ledger)
    wait_for(lambda: not h.wb.pending_nodes())
    ((method, path, headers, body, _),) = h.server.requests
    assert (method, path) == ("PATCH", "/api/v1/nodes/n1/status")
    assert headers["Content-Type"] == "application/merge-patch+json"
    assert body == {"status": {"capacity": expected, "allocatable": expected}}
    cap, alloc = h.server.owned("n1")
    want = {k: str(v) for k, v in h.ledger.node("n1").ephemeral.items()}  # type: ignore[union-attr]
    assert cap == alloc == want
    st = h.server.nodes["n1"]["status"]
    assert all(st["capacity"][k] == st["allocatable"][k] == v for k, v in FOREIGN.items())


# ---- coalescing and concurrency ----------------------------------------------------------


def test_many_changes_coalesce_into_one_patch_per_node(make: Callable[..., Harness]) -> None:
    h = make(writeback_coalesce_seconds=0.2)
    for n in ("n1", "n2", "n3"):
        h.node(n, {"escher.io/old": 1})
    h.wb.start()
    for i in range(1, 21):
        h.ledger.set_capacity("escher.io/g", {"n1": i, "n2": 100 + i})
    h.ledger.remove_resource("escher.io/old")
    v = h.ledger.version
    assert h.wb.wait_durable(v, ["n1", "n2", "n3"], 5)
    assert len(h.server.patches("n1")) == 1
    assert len(h.server.patches("n2")) == 1
    assert len(h.server.patches("n3")) == 1
    assert h.server.owned("n1")[0] == {"escher.io/g": "20"}
    assert h.server.owned("n2")[1] == {"escher.io/g": "120"}
    assert h.server.owned("n3") == ({}, {})
    assert h.sample("escher_writeback_lag_seconds_count") == 3
    assert h.sample("escher_writeback_lag_seconds_sum") >= 3 * 0.2


def test_many_dirty_nodes_are_patched_concurrently(make: Callable[..., Harness]) -> None:
    h = make()
    nodes = [f"n{i}" for i in range(24)]
    for n in nodes:
        h.node(n)
    h.server.on_patch = lambda _: time.sleep(0.05)
    h.wb.start()
    v = h.ledger.set_capacity("escher.io/g", dict.fromkeys(nodes, 1))
    assert h.wb.wait_durable(v, nodes, 5)
    assert len(h.server.patches()) == len(nodes)
    assert h.server.max_in_flight > 1


def test_a_change_during_a_patch_is_written_after_it(make: Callable[..., Harness]) -> None:
    h = make()
    h.node("n1")
    go = threading.Event()
    h.server.on_patch = lambda _: go.wait(5)
    h.wb.start()
    h.ledger.set_capacity("escher.io/g", {"n1": 1})
    wait_for(lambda: bool(h.server.requests))
    v2 = h.ledger.set_capacity("escher.io/g", {"n1": 2})  # while the first patch is under way
    time.sleep(0.05)  # the writer has seen it and found the node busy
    h.server.on_patch = None
    go.set()
    assert h.wb.wait_durable(v2, ["n1"], 2)
    assert [b["status"]["capacity"] for b in h.server.patches()] == [
        {"escher.io/g": "1"},
        {"escher.io/g": "2"},
    ]


def test_nothing_is_written_when_nothing_changed(make: Callable[..., Harness]) -> None:
    h = make()
    h.node("n1", {"escher.io/a": 1})
    h.wb.start()
    h.ledger.upsert_node("n1", {"zone": "a"}, {"cpu": 32000})  # not an ephemeral change
    h.ledger.set_capacity("escher.io/a", {"n1": 1})  # same value: no change
    time.sleep(0.1)
    assert h.server.requests == []
    assert h.wb.pending_nodes() == []


# ---- failures ----------------------------------------------------------------------------


def test_retries_with_exponential_backoff_until_success(make: Callable[..., Harness]) -> None:
    h = make(writeback_backoff_initial_seconds=0.05, writeback_backoff_max_seconds=0.15)
    h.node("n1")
    h.server.fail = [503, 429, urllib3.exceptions.ProtocolError("connection reset"), 409]
    h.wb.start()
    v = h.ledger.set_capacity("escher.io/g", {"n1": 4})
    assert h.wb.wait_durable(v, ["n1"], 5)
    times = [r[4] for r in h.server.requests]
    assert len(times) == 5
    gaps = [b - a for a, b in itertools.pairwise(times)]
    for gap, backoff in zip(gaps, [0.05, 0.1, 0.15, 0.15], strict=True):
        assert gap >= backoff * 0.9
    assert h.server.owned("n1")[0] == {"escher.io/g": "4"}
    for reason in ("server_error", "throttled", "unreachable", "conflict"):
        assert h.sample("escher_writeback_failures_total", {"reason": reason}) == 1


def test_wait_durable_false_while_api_fails_then_true(make: Callable[..., Harness]) -> None:
    h = make()
    h.node("n1")
    h.server.fail_always = 500
    h.wb.start()
    v = h.ledger.set_capacity("escher.io/g", {"n1": 1})
    t0 = time.monotonic()
    assert not h.wb.wait_durable(v, ["n1"], 0.3)
    assert time.monotonic() - t0 >= 0.3
    assert h.wb.pending_nodes() == ["n1"]
    assert h.sample("escher_writeback_pending_nodes") == 1
    assert len(h.server.patches()) >= 3  # it keeps trying
    h.server.fail_always = None
    assert h.wb.wait_durable(v, ["n1"], 5)
    assert h.wb.pending_nodes() == []
    assert h.sample("escher_writeback_pending_nodes") == 0


def test_wait_durable_is_per_version(make: Callable[..., Harness]) -> None:
    h = make()
    h.node("n1")
    h.node("n2")
    h.wb.start()
    v1 = h.ledger.set_capacity("escher.io/g", {"n1": 1})
    assert h.wb.wait_durable(v1, ["n1", "n2"], 5)  # n2: nothing to write, durable at once
    h.server.fail_always = 500
    v2 = h.ledger.set_capacity("escher.io/g", {"n1": 2})
    # The node still holds the state as of v1 (nothing of n1 changed between v1 and v2).
    assert h.wb.wait_durable(v1, ["n1"], 0)
    assert not h.wb.wait_durable(v2, ["n1"], 0.1)
    assert h.wb.wait_durable(v2, ["n2"], 0)


def test_node_gone_is_dropped_not_retried(make: Callable[..., Harness]) -> None:
    h = make()
    h.node("n1")
    h.ledger.upsert_node("ghost", {}, {})  # in the ledger, not in the API server
    h.wb.start()
    v = h.ledger.set_capacity("escher.io/g", {"n1": 1, "ghost": 1})
    assert h.wb.wait_durable(v, ["n1", "ghost"], 5)
    time.sleep(0.1)
    ghost = [r for r in h.server.requests if "ghost" in r[1]]
    assert [r[0] for r in ghost] == ["PATCH"]  # 404: dropped, not retried
    assert h.wb.pending_nodes() == []
    assert h.sample("escher_writeback_failures_total", {"reason": "not_found"}) == 0


def test_node_removed_from_the_ledger_is_not_written(make: Callable[..., Harness]) -> None:
    h = make(writeback_coalesce_seconds=0.1)
    h.node("n1")
    h.wb.start()
    v = h.ledger.set_capacity("escher.io/g", {"n1": 1})
    h.ledger.remove_node("n1")
    assert h.wb.wait_durable(v, ["n1"], 5)
    assert h.server.requests == []


# ---- drift -------------------------------------------------------------------------------


def test_mark_dirty_reasserts_the_ledger_state(make: Callable[..., Harness]) -> None:
    h = make()
    h.node("n1", {"escher.io/a": 2, "escher.io/b": 1})
    h.wb.start()
    # Someone else resets the node: drops ours, adds a stray key under our domain, and
    # changes a foreign resource (which must survive).
    st = h.server.nodes["n1"]["status"]
    for m in (st["capacity"], st["allocatable"]):
        del m["escher.io/a"]
        m["escher.io/stray"] = "9"
        m["example.com/gpu"] = "8"
    st["allocatable"]["escher.io/b"] = "5"
    h.wb.mark_dirty("n1")
    assert h.wb.wait_durable(h.ledger.version, ["n1"], 5)
    assert h.server.gets() == ["/api/v1/nodes/n1/status"]
    want = {"escher.io/a": "2", "escher.io/b": "1", "escher.io/stray": None}
    assert h.server.patches("n1") == [{"status": {"capacity": want, "allocatable": want}}]
    assert h.server.owned("n1") == ({"escher.io/a": "2", "escher.io/b": "1"},) * 2
    assert st["capacity"]["example.com/gpu"] == st["allocatable"]["example.com/gpu"] == "8"


def test_mark_dirty_of_a_node_in_step_reads_it_and_writes_nothing(
    make: Callable[..., Harness],
) -> None:
    h = make()
    h.node("n1", {"escher.io/a": 2})
    h.wb.start()
    h.wb.mark_dirty("n1")
    assert h.wb.wait_durable(h.ledger.version, ["n1"], 5)
    assert h.server.gets() == ["/api/v1/nodes/n1/status"]
    assert h.server.patches() == []


def test_drift_with_a_write_pending_uses_the_patch_reply_not_a_read(
    make: Callable[..., Harness],
) -> None:
    h = make(writeback_coalesce_seconds=0.1)
    h.node("n1", {"escher.io/a": 1})
    h.wb.start()
    h.server.nodes["n1"]["status"]["capacity"]["escher.io/stray"] = "1"
    h.server.nodes["n1"]["status"]["allocatable"]["escher.io/stray"] = "1"
    v = h.ledger.set_capacity("escher.io/a", {"n1": 2})
    h.wb.mark_dirty("n1")  # the view saw the stray (and the old value of a)
    assert h.wb.wait_durable(v, ["n1"], 5)
    assert h.server.gets() == []
    bodies = h.server.patches("n1")
    assert bodies[0]["status"]["capacity"] == {"escher.io/a": "2"}
    # The reply showed the stray: the next patch removes it.
    assert bodies[1]["status"]["capacity"] == {"escher.io/stray": None}
    assert h.server.owned("n1") == ({"escher.io/a": "2"},) * 2
    assert h.sample("escher_writeback_failures_total", {"reason": "drift"}) == 1


def test_drift_reported_while_a_patch_is_in_flight_is_not_lost(
    make: Callable[..., Harness],
) -> None:
    h = make()
    h.node("n1")
    h.wb.start()

    def other_writer(name: str) -> None:
        h.server.after_patch = None
        st = h.server.nodes[name]["status"]
        st["capacity"]["escher.io/stray"] = st["allocatable"]["escher.io/stray"] = "1"
        h.wb.mark_dirty(name)  # what the view does on seeing that change

    h.server.after_patch = other_writer
    h.ledger.set_capacity("escher.io/g", {"n1": 1})
    wait_for(lambda: h.server.owned("n1")[0] == {"escher.io/g": "1"})
    assert h.wb.wait_durable(h.ledger.version, ["n1"], 5)
    assert h.server.owned("n1") == ({"escher.io/g": "1"},) * 2


def test_a_change_racing_start_is_verified_against_the_node(
    make: Callable[..., Harness], monkeypatch: pytest.MonkeyPatch
) -> None:
    h = make()
    h.node("n1")
    snapshot = h.ledger.snapshot

    def change_then_snapshot() -> Any:
        # Lands after start() subscribed and before its snapshot: in the snapshot that
        # seeds "last written", but not on the node.
        h.ledger.set_capacity("escher.io/g", {"n1": 3})
        return snapshot()

    monkeypatch.setattr(h.ledger, "snapshot", change_then_snapshot)
    h.wb.start()
    monkeypatch.setattr(h.ledger, "snapshot", snapshot)
    assert h.wb.wait_durable(h.ledger.version, ["n1"], 5)
    assert h.server.gets() == ["/api/v1/nodes/n1/status"]
    assert h.server.owned("n1") == ({"escher.io/g": "3"},) * 2


# ---- lifecycle -----------------------------------------------------------------------------


def test_stop_is_bounded_while_a_patch_hangs(make: Callable[..., Harness]) -> None:
    h = make()
    h.node("n1")
    release = threading.Event()
    h.server.on_patch = lambda _: release.wait(5)
    h.wb.start()
    h.ledger.set_capacity("escher.io/g", {"n1": 1})
    wait_for(lambda: bool(h.server.requests))
    t0 = time.monotonic()
    h.wb.stop(timeout=0.2)
    assert time.monotonic() - t0 < 1.0
    release.set()


def test_wait_durable_returns_false_after_stop(make: Callable[..., Harness]) -> None:
    h = make()
    h.node("n1")
    h.server.fail_always = 500
    h.wb.start()
    v = h.ledger.set_capacity("escher.io/g", {"n1": 1})
    threading.Timer(0.1, h.wb.stop).start()
    t0 = time.monotonic()
    assert not h.wb.wait_durable(v, ["n1"], 5)
    assert time.monotonic() - t0 < 2


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (ApiException(status=0, reason="SSLError"), "unreachable"),
        (ApiException(status=404), "not_found"),
        (ApiException(status=409), "conflict"),
        (ApiException(status=410), "gone"),
        (ApiException(status=429), "throttled"),
        (ApiException(status=503), "server_error"),
        (ApiException(status=401), "unauthorized"),
        (ApiException(status=403), "forbidden"),
        (ApiException(status=422), "rejected"),
        (urllib3.exceptions.ProtocolError("reset"), "unreachable"),
        (ConnectionRefusedError(), "unreachable"),
        (ValueError("bad json"), "error"),
    ],
)
def test_failure_reason(exc: BaseException, reason: str) -> None:
    assert failure_reason(exc) == reason
