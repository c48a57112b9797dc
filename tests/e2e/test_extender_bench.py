"""`escher-extender bench extender --modes extender-split` end to end on the real local
control plane, tiny: 5 nodes, 16 pods per workload (gangs of 8), one repetition.

What it proves, with real kube-scheduler and the extender as deploy/ runs it (each exchange
only for the pods marked for it): every pod class is bound, none over capacity; gang members
go through the extender's filter and bind (the barrier) while the other classes send no
filter or bind at all. Mode none, the gang members' baseline, is kube-scheduler alone placing
the same pods (no exchange); the unit tests
(tests/unit/harness/bench/test_bench_throughput.py, test_bench_extender_summary.py) cover the
workloads' pods and the ratio.
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
        pods=16,
        modes=("extender-split",),
        latency=False,
        memory=False,
        wake_trials=0,
    )
    assert extender_bench.run(tmp_path, cfg) == 0

    doc = json.loads((tmp_path / "results.json").read_text())
    rows = {(r["mode"], r["workload"]): r for r in doc["throughput"]}
    assert set(rows) == {("extender-split", k) for k in ("plain", "ephemeral", "prefer", "gang")}
    for key, r in rows.items():
        assert r["pods_per_s"] > 0 and r["over_capacity"] == [], (key, r)
    verbs = {k: (rows[("extender-split", k)]["extender"] or {}).get("verb_ms", {}) for k in
             ("plain", "ephemeral", "prefer", "gang")}  # fmt: skip
    # Gang members, and only they, are filtered and bound by the extender: 16 each.
    assert verbs["gang"]["filter"]["count"] >= 16 and verbs["gang"]["bind"]["count"] == 16, verbs
    assert all("bind" not in verbs[k] and "filter" not in verbs[k] for k in verbs if k != "gang")
    assert set(verbs["prefer"]) == {"prioritize"}, verbs
    assert "gang members: against none" in (tmp_path / "report.md").read_text()
