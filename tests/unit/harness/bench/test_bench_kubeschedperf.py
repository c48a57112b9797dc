"""bench scheduling-perf without a cluster: audit log lines read into pods' created and
scheduled times as kube-scheduling-perf reads them, the figures from them (partly bound
gangs, nodes over capacity), the scenarios' shapes, a pod's create retried as a controller
would (against a stand-in API), and kube-apiserver's audit flags.
The run itself is tests/e2e/test_scheduling_perf_bench.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from escher_harness.bench.kubeschedperf import audit, report, shapes, submit
from escher_harness.localcluster import config

T0 = "2026-11-29T07:00:00.000000Z"


def _ts(seconds: float) -> str:
    return f"2026-11-29T07:00:{seconds:09.6f}Z"


def _event(
    verb: str,
    name: str,
    at: float,
    *,
    sub: str = "",
    code: int = 201,
    stage: str = "ResponseComplete",
    namespace: str = "default",
    resource: str = "pods",
    request: dict[str, Any] | None = None,
) -> str:
    ref = {"resource": resource, "namespace": namespace, "name": name, "apiVersion": "v1"}
    if sub:
        ref["subresource"] = sub
    return json.dumps(
        {
            "kind": "Event",
            "stage": stage,
            "verb": verb,
            "objectRef": ref,
            "responseStatus": {"metadata": {}, "code": code},
            "requestObject": request or {},
            "stageTimestamp": _ts(at),
        },
        separators=(",", ":"),
    )


def _bind(name: str, at: float, node: str = "n1", **kw: Any) -> str:
    return _event("create", name, at, sub="binding", request={"target": {"name": node}}, **kw)


def test_timestamp_reads_microseconds_as_seconds() -> None:
    assert audit.timestamp(_ts(1.5)) - audit.timestamp(T0) == pytest.approx(1.5)


@pytest.mark.parametrize(
    ("line", "created", "bound", "finished"),
    [
        (_event("create", "a-0", 1.0), {"a-0": 1.0}, {}, {}),
        (_bind("a-0", 2.5, "n7"), {}, {"a-0": (2.5, "n7")}, {}),
        (
            _event("patch", "a-0", 9.0, sub="status", request={"status": {"phase": "Succeeded"}}),
            {},
            {},
            {"a-0": 9.0},
        ),
        # Not counted: a refused create, a binding refused, another stage, namespace or kind.
        (_event("create", "a-0", 1.0, code=409), {}, {}, {}),
        (_bind("a-0", 2.0, code=409), {}, {}, {}),
        (_event("create", "a-0", 1.0, stage="RequestReceived"), {}, {}, {}),
        (_event("create", "a-0", 1.0, namespace="kube-system"), {}, {}, {}),
        (_event("create", "a-0", 1.0, resource="podgroups"), {}, {}, {}),
        (
            _event("patch", "a-0", 3.0, sub="status", request={"status": {"phase": "Running"}}),
            {},
            {},
            {},
        ),
    ],
)
def test_read_keeps_pods_creates_bindings_and_ends_only(
    line: str,
    created: dict[str, float],
    bound: dict[str, tuple[float, str]],
    finished: dict[str, float],
) -> None:
    t = audit.read([line])
    base = audit.timestamp(T0)
    assert {k: round(v - base, 6) for k, v in t.created.items()} == created
    assert {k: (round(v[0] - base, 6), v[1]) for k, v in t.bound.items()} == bound
    assert {k: round(v - base, 6) for k, v in t.finished.items()} == finished


def _times(created: dict[str, float], bound: dict[str, float], node: str = "n1") -> audit.PodTimes:
    return audit.PodTimes(created=dict(created), bound={p: (t, node) for p, t in bound.items()})


def test_figures_pair_each_pod_and_time_the_last_binding_from_the_first_create() -> None:
    t = _times(
        {"j0-0": 10.0, "j0-1": 11.0, "j1-0": 12.0}, {"j0-0": 13.0, "j0-1": 13.5, "j1-0": 20.0}
    )
    f = audit.figures(t, pods=3)
    assert (f["created"], f["scheduled"]) == (3, 3)
    assert f["to_last_scheduled_s"] == 10.0  # 20.0 - 10.0
    assert f["binding_window_s"] == 7.0 and f["creation_s"] == 2.0
    assert f["latency_s"]["p50"] == 3.0 and f["latency_s"]["max"] == 8.0


def test_figures_give_no_time_to_last_scheduled_while_a_pod_waits() -> None:
    t = _times({"j0-0": 1.0, "j0-1": 1.0}, {"j0-0": 2.0})
    f = audit.figures(t, pods=2)
    assert f["scheduled"] == 1 and f["to_last_scheduled_s"] is None


@pytest.mark.parametrize(
    ("binds", "size", "partly"),
    [
        ({"g-0": 1.0, "g-1": 1.2, "g-2": 1.9}, 3, False),  # one burst, gaps under a second
        ({"g-0": 1.0, "g-1": 1.2, "g-2": 2.5}, 3, True),  # one member 1.3 s after the rest
        ({"g-0": 1.0, "g-1": 1.1}, 3, True),  # left incomplete
        ({}, 3, False),  # never bound: waiting whole is not partly bound
    ],
)
def test_partly_bound_gangs(binds: dict[str, float], size: int, partly: bool) -> None:
    t = _times(dict.fromkeys(binds, 0.0), binds)
    assert audit.partly_bound_gangs(t, {"g": size}) == (["g"] if partly else [])


@pytest.mark.parametrize(
    ("bound", "finished", "room", "over"),
    [
        ({"a": 1.0, "b": 2.0}, {}, 2, {}),
        ({"a": 1.0, "b": 2.0, "c": 3.0}, {}, 2, {"n1": 3}),
        ({"a": 1.0, "b": 2.0, "c": 3.0}, {"a": 2.5}, 2, {}),  # a finished: room again
        ({"a": 1.0, "b": 2.0, "c": 3.0}, {"a": 3.0}, 2, {}),  # freed and taken at once
    ],
)
def test_over_capacity(
    bound: dict[str, float], finished: dict[str, float], room: int, over: dict[str, int]
) -> None:
    t = _times(dict.fromkeys(bound, 0.0), bound)
    t.finished = dict(finished)
    assert audit.over_capacity(t, room) == over


def test_count_bindings_counts_successful_binding_creates_only() -> None:
    text = "\n".join(
        [_bind("a", 1.0), _bind("b", 1.0), _bind("c", 1.0, code=409), _event("create", "d", 1.0)]
    )
    assert audit.count_bindings(text) == 2


def test_read_file_reads_a_log(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text(_event("create", "x-0", 1.0) + "\n" + _bind("x-0", 2.0) + "\n")
    t = audit.read_file(log)
    assert set(t.created) == set(t.bound) == {"x-0"}


def test_the_eight_scenarios_are_the_projects() -> None:
    assert [s.name for s in shapes.SCENARIOS] == [
        "10000x1", "500x20", "20x500", "1x10000",
        "10000x1-gang", "500x20-gang", "20x500-gang", "1x10000-gang",
    ]  # fmt: skip
    assert all(s.pods == shapes.PODS for s in shapes.SCENARIOS)
    assert [s.number for s in shapes.SCENARIOS] == list(range(1, 9))
    assert set(shapes.PUBLISHED) <= {s.number for s in shapes.SCENARIOS}


@pytest.mark.parametrize(
    ("name", "pods", "jobs", "size"),
    [
        ("10000x1", 40, 40, 1),
        ("500x20-gang", 40, 2, 20),
        ("20x500-gang", 1000, 2, 500),
        ("20x500", 40, 1, 40),
        ("1x10000-gang", 1000, 1, 1000),
        ("500x20", 10_000, 500, 20),
    ],
)
def test_scaled_keeps_a_jobs_size_where_it_fits(name: str, pods: int, jobs: int, size: int) -> None:
    s = shapes.BY_NAME[name].scaled(pods)
    assert (s.jobs, s.size, s.gang) == (jobs, size, name.endswith("-gang"))


def test_chosen_refuses_an_unknown_scenario() -> None:
    assert shapes.chosen(None) == shapes.SCENARIOS
    assert shapes.chosen(["1x10000-gang"]) == (shapes.BY_NAME["1x10000-gang"],)
    with pytest.raises(ValueError, match="unknown scenario '1x9'"):
        shapes.chosen(["1x9"])


def test_apiserver_audit_flags_only_when_asked(tmp_path: Path) -> None:
    kw: dict[str, Any] = {
        "etcd_port": 1,
        "port": 2,
        "cert_dir": tmp_path,
        "tokens": tmp_path / "t",
        "sa_key": tmp_path / "k",
        "feature_gates": {},
        "runtime_config": {},
    }
    plain = config.apiserver_command(Path("kube-apiserver"), **kw)
    assert not [a for a in plain if a.startswith("--audit")]
    policy, log = tmp_path / "p.yaml", tmp_path / "a.log"
    audited = config.apiserver_command(Path("kube-apiserver"), **kw, audit=(policy, log))
    assert f"--audit-policy-file={policy}" in audited
    assert f"--audit-log-path={log}" in audited and "--audit-log-format=json" in audited


class _Reply:
    def read(self) -> bytes:
        return b"{}"

    def release_conn(self) -> None:
        pass


class _Core:
    """A stand-in CoreV1Api answering each create with the next status (201: created)."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses, self.calls = list(statuses), 0

    def create_namespaced_pod(self, namespace: str, body: Any, **_: Any) -> _Reply:
        self.calls += 1
        status = self.statuses.pop(0)
        if status != 201:
            raise ApiException(status=status, reason=f"status {status}")
        return _Reply()


@pytest.mark.parametrize(
    ("statuses", "error", "calls"),
    [
        ([201], None, 1),
        ([504, 201], None, 2),  # not answered in time, then created
        ([504, 409], None, 2),  # the first try was stored after all
        ([429, 503, 500, 201], None, 4),
        ([504, 504, 504, 504], "504 status 504", 4),  # retries run out
        ([409], "409 status 409", 1),  # a name taken before: not ours
        ([422], "422 status 422", 1),  # refused: no retry
    ],
)
def test_create_pod_retries_what_the_api_server_did_not_answer(
    statuses: list[int], error: str | None, calls: int
) -> None:
    core = _Core(statuses)
    assert submit.create_pod(core, {"metadata": {"name": "j0-0"}}) == error
    assert core.calls == calls


@pytest.mark.parametrize(
    ("writes", "scheduled", "per_pod"),
    [
        ({"POST pods": 10, "POST pods/binding": 10}, 10, 2.0),
        ({"POST pods": 10}, 0, None),  # nothing scheduled: no per-pod figure
        ({"POST pods": 10, "POST nodes": -100}, 10, None),  # a cut-short /metrics answer
    ],
)
def test_writes_per_pod(writes: dict[str, int], scheduled: int, per_pod: float | None) -> None:
    row = report.aggregate({"s": {"a": {1: {"writes": writes, "scheduled": scheduled}}}})
    figure = row["s"]["a"]["figures"]["API writes/pod"]
    assert (figure and figure["median"]) == per_pod


def test_a_pod_bound_before_its_create_was_answered_counts_scheduled_at_once() -> None:
    t = _times({"j0-0": 5.0, "j1-0": 1.0}, {"j0-0": 4.9, "j1-0": 2.0})
    f = audit.figures(t, pods=2)
    assert f["scheduled"] == 2 and f["bound_before_create_answered"] == 1
    assert f["latency_s"]["p50"] == 0.0 and f["latency_s"]["max"] == 1.0
    assert audit.series(t, 1.0)["latencies"] == [0.0, 1.0]
