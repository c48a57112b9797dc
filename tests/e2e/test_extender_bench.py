"""`escher-extender bench extender --modes none,extender-split` end to end on the real local
control plane, tiny: 5 nodes, 24 pods per workload (gangs of 8), one repetition.

What it proves, with real kube-scheduler and the extender as deploy/ runs it (each exchange
only for the pods marked for it): every pod class is bound, none over capacity; gang members
go through the extender's filter and bind (the barrier) while the other classes send no
filter or bind at all; mode none places the same gang pods with no exchange; and the report
gives the gang members' ratio to kube-scheduler alone. The unit tests
(tests/unit/harness/bench/test_bench_throughput.py, test_bench_extender_summary.py) cover the
workloads' pods and the summary.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from escher_harness.bench import extender_bench

pytestmark = pytest.mark.e2e


def test_bench_extender_measures_every_pod_class_gang_members_included(tmp_path: Path) -> None:
    cfg = extender_bench.Config(
        sizes=(5,),
        repeat=1,
        pods=24,
        modes=("none", "extender-split"),
        latency=False,
        memory=False,
        wake_trials=0,
    )
    assert extender_bench.run(tmp_path, cfg) == 0

    doc = json.loads((tmp_path / "results.json").read_text())
    rows = {(r["mode"], r["workload"]): r for r in doc["throughput"]}
    assert set(rows) == {
        ("none", "plain"),
        ("none", "gang"),
        *(("extender-split", k) for k in ("plain", "ephemeral", "prefer", "gang")),
    }
    for key, r in rows.items():
        assert r["pods_per_s"] > 0 and r["over_capacity"] == [], (key, r)
    verbs = {k: (rows[("extender-split", k)]["extender"] or {}).get("verb_ms", {}) for k in
             ("plain", "ephemeral", "prefer", "gang")}  # fmt: skip
    # Gang members, and only they, are filtered and bound by the extender: 24 each.
    assert verbs["gang"]["filter"]["count"] >= 24 and verbs["gang"]["bind"]["count"] == 24, verbs
    assert all("bind" not in verbs[k] and "filter" not in verbs[k] for k in verbs if k != "gang")
    assert set(verbs["prefer"]) == {"prioritize"}, verbs
    assert rows[("none", "gang")]["extender"] is None  # kube-scheduler alone
    (gang,) = [s for s in doc["summary"] if s["workload"] == "gang"]
    assert set(gang["ratios"]) == {"extender-split/none"}, gang["ratios"]
    assert "gang members: against none" in (tmp_path / "report.md").read_text()
