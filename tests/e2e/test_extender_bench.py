"""`escher-extender bench extender` end to end on the real local control plane, tiny: 5
nodes, one repetition, one mode per test.

Mode extender-split (16 pods per class, gangs of 8), as deploy/ runs it (each exchange only
for the pods marked for it): every pod class is bound, none over capacity; gang members go
through the extender's filter and bind (the barrier) while the other classes send no filter or
bind at all. Mode none, the gang members' baseline, is kube-scheduler alone placing the same
pods (no exchange).

Mode dra (30 pods per class, two set_resource-to-schedulable trials), with real
kube-scheduler (DynamicResources allocating devices in claims) and kube-controller-manager
(claims deleted with their pods): every workload is bound, with its API writes per pod counted
from kube-apiserver's metrics (a claim created and its status written per pod of a resource,
none for plain pods), kube-controller-manager's CPU reported as its own process, no node
holding more claimed devices than it publishes, the waiting pods bound once their resource is
set, and the report's tables.

The unit tests (tests/unit/harness/bench: test_bench_throughput.py,
test_bench_extender_summary.py, test_bench_dra.py) cover the workloads' pods, the ratios, the
parsing and the summary.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from escher_harness.bench import extender_bench, throughput

pytestmark = pytest.mark.e2e


def _bench(
    tmp_path: Path,
    modes: Sequence[throughput.Mode],
    *,
    pods: int,
    wake_trials: int = 0,
    wake_pods: int = 10,
) -> dict[str, Any]:
    """One tiny run of the benchmark's throughput part into `tmp_path`; its results.json."""
    cfg = extender_bench.Config(
        sizes=(5,),
        repeat=1,
        pods=pods,
        modes=modes,
        latency=False,
        memory=False,
        wake_trials=wake_trials,
        wake_pods=wake_pods,
    )
    assert extender_bench.run(tmp_path, cfg) == 0
    doc: dict[str, Any] = json.loads((tmp_path / "results.json").read_text())
    return doc


def test_bench_extender_measures_every_pod_class_gang_members_included(tmp_path: Path) -> None:
    doc = _bench(tmp_path, ("extender-split",), pods=16)  # gangs of 8
    rows = {(r["mode"], r["workload"]): r for r in doc["throughput"]}
    assert set(rows) == {("extender-split", k) for k in ("plain", "ephemeral", "prefer", "gang")}
    for key, r in rows.items():
        assert r["pods_per_s"] > 0 and r["over_capacity"] == [], (key, r)
    verbs = {k: (rows[("extender-split", k)]["extender"] or {}).get("verb_ms", {}) for k in
             ("plain", "ephemeral", "prefer", "gang")}  # fmt: skip
    # Gang members, and only they, are filtered and bound by the extender: 16 each.
    assert verbs["gang"]["filter"]["count"] >= 16 and verbs["gang"]["bind"]["count"] == 16, verbs
    assert all("bind" not in verbs[k] and "filter" not in verbs[k] for k in verbs if k != "gang")
    # Pods with a preference are nominated for their node (extender.preference) and skip
    # prioritize; only those whose nomination had not landed when their cycle came are scored.
    assert set(verbs["prefer"]) <= {"prioritize"}, verbs
    assert verbs["prefer"].get("prioritize", {}).get("count", 0) < 16, verbs
    assert "gang members: against none" in (tmp_path / "report.md").read_text()


def test_bench_extender_measures_mode_dra(tmp_path: Path) -> None:
    doc = _bench(tmp_path, ("dra",), pods=30, wake_trials=2, wake_pods=3)
    rows = {r["workload"]: r for r in doc["throughput"]}
    assert set(rows) == {"plain", "ephemeral", "prefer"}
    for kind, r in rows.items():
        assert r["mode"] == "dra" and r["pods_per_s"] > 0, r
        assert r["over_capacity"] == [], r["over_capacity"]
        assert "kube-controller-manager" in r["cpu_ms_per_pod"], r["cpu_ms_per_pod"]
        # kube-scheduler's client-side QPS waits are read (every request passes the bucket).
        assert r["scheduler"]["client_requests"] > 0, r["scheduler"]
        writes = r["api_writes"]["by_request"]
        assert writes.get("POST pods/binding") == 1.0, writes
        claims = writes.get("POST resourceclaims", 0.0)
        # A claim per pod of a resource (DRA-backed), none for pods of cpu and memory only.
        assert claims == (0.0 if kind == "plain" else 1.0), (kind, writes)
    assert rows["ephemeral"]["api_writes"]["per_pod"] > rows["plain"]["api_writes"]["per_pod"]
    trials = doc["wake"]
    assert len(trials) == 2 and all(t["bound"] == 3 and t["all_s"] is not None for t in trials)
    assert all(0 <= t["first_s"] <= t["all_s"] for t in trials), trials
    (wake,) = doc["wake_summary"]
    assert (wake["mode"], wake["trials"], wake["not_all_bound"]) == ("dra", 2, 0)
    report = (tmp_path / "report.md").read_text()
    assert "writes/pod" in report and "set_resource-to-schedulable" in report
    assert "kube-controller-manager" in report
