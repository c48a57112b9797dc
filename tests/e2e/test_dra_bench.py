"""`escher-extender bench extender --modes dra` end to end on the real local control plane,
tiny: 5 nodes, 30 pods per workload, two set_resource-to-schedulable trials, one repetition.

What it proves, with real kube-scheduler (DynamicResources allocating devices in claims) and
kube-controller-manager (claims deleted with their pods): every workload is bound, with its
API writes per pod counted from kube-apiserver's metrics (a claim created and its status
written per pod of a resource, none for plain pods), kube-controller-manager's CPU reported
as its own process, no node holding more claimed devices than it publishes, the waiting pods
bound once their resource is set, and the report's tables. The unit tests
(tests/unit/harness/bench/test_bench_dra.py) cover the parsing and the summary.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from escher_harness.bench import extender_bench

pytestmark = pytest.mark.e2e


def test_bench_extender_measures_mode_dra(tmp_path: Path) -> None:
    cfg = extender_bench.Config(
        sizes=(5,),
        repeat=1,
        pods=30,
        modes=("dra",),
        latency=False,
        memory=False,
        wake_trials=2,
        wake_pods=3,
    )
    assert extender_bench.run(tmp_path, cfg) == 0

    doc = json.loads((tmp_path / "results.json").read_text())
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
