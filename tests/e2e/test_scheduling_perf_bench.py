"""`escher-extender bench scheduling-perf` end to end on the real local control plane, tiny:
two of kube-scheduling-perf's scenarios (twelve jobs of one pod; one gang of twelve) for
the extender as deploy/ ships it, one repetition, three kwok nodes.

What it proves, with the real kube-apiserver's audit log, kube-scheduler, the extender and
kwok: every pod created is counted created and scheduled from the audit log, and as many
Bindings as kube-apiserver's own /metrics counted; each pod's times are in order (created
before scheduled, the last binding after the first create); the gang was bound whole (no
member before the last of them existed); no node held more than its room; the CPU and
writes were measured; and the report and plots were written. The parsing and figures are
unit-tested in
tests/unit/harness/bench/test_bench_kubeschedperf.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from escher_harness.bench.kubeschedperf import run, shapes

PODS = 12


def test_two_scenarios_every_pod_counted_from_the_audit_log(tmp_path: Path) -> None:
    cfg = run.Config(
        scenarios=shapes.chosen(["10000x1", "1x10000-gang"]),
        approaches=("extender",),
        repeat=1,
        nodes=3,
        pods=PODS,
        stall=30.0,
        timeout=120.0,
    )
    assert run.run(tmp_path, cfg) == 0

    for name in ("10000x1", "1x10000-gang"):
        r = json.loads((tmp_path / "runs" / "r1" / name / "extender" / "run.json").read_text())
        assert "error" not in r, r
        assert r["stopped"] == "all bound", r["stopped"]
        assert r["created"] == r["scheduled"] == PODS, name
        # The audit log's bindings are the API server's own count of them.
        assert r["writes"].get("POST pods/binding") == PODS, r["writes"]
        s = r["series"]
        assert len(s["created"]) == len(s["scheduled"]) == len(s["latencies"]) == PODS
        assert s["created"][0] == 0.0 and min(s["latencies"]) >= 0, s
        assert r["to_last_scheduled_s"] == s["scheduled"][-1] >= r["binding_window_s"]
        assert r["latency_s"]["max"] <= r["to_last_scheduled_s"]
        assert r["nodes_over_capacity"] == 0 and 1 <= r["nodes_used"] <= cfg.nodes
        assert r["cpu_seconds"]["kube-scheduler"] > 0 and r["cpu_seconds"]["extender"] > 0
    gang = json.loads(
        (tmp_path / "runs" / "r1" / "1x10000-gang" / "extender" / "run.json").read_text()
    )
    # All or nothing: no member was bound before the last of the gang existed.
    assert min(gang["series"]["scheduled"]) >= max(gang["series"]["created"]), gang["series"]
    assert isinstance(gang["partly_bound_gangs"], int)
    report = (tmp_path / "report.md").read_text()
    assert "| extender | 12 |" in report and "*Volcano (theirs)*" in report
    assert (tmp_path / "scheduling-perf-1x10000-gang.png").stat().st_size > 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["results"]["10000x1"]["extender"]["figures"]["scheduled"]["median"] == PODS
