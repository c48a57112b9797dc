"""`escher-extender bench gang` end to end on the real local control plane, small: one short
scenario replayed by the extender and by native gang scheduling, one repetition.

What it proves, with real locust, kube-scheduler and kwok: both approaches replay the same
trace (the same digest, every gang of it submitted); every gang completes, then runs its run
time under kwok and is seen Succeeded (jobs that run and finish); the replay kept to its
schedule; and the report carries the versions, the footing and the figures. The unit tests
(tests/unit/harness/bench/test_bench_gang_*.py) cover the campaign's logic without a cluster.
"""

from __future__ import annotations

import json
from pathlib import Path

from escher_harness.bench import gang_bench, presets, scenario


def test_two_approaches_replay_one_trace_and_every_gang_runs_to_success(
    tmp_path: Path,
) -> None:
    preset = presets.customised(
        presets.QUICK,
        scenarios=["no-contention"],
        nodes=4,
        duration=4.0,
        rate=1.0,
        sizes="2:1,3:1",
        run_time="uniform:0.5,1.5",
    )
    which = ("extender", "native")
    assert gang_bench.run(tmp_path, preset, which) == 0

    doc = json.loads((tmp_path / "results.json").read_text())
    sc = preset.scenarios[0]
    arrivals = scenario.generate(sc, preset.seed)
    assert len(arrivals) >= 2
    assert doc["workloads"][sc.name]["digest"] == scenario.digest(arrivals)
    for approach in which:
        run = json.loads((tmp_path / "runs" / "r1" / sc.name / approach / "run.json").read_text())
        assert "error" not in run, run
        assert run["gangs_submitted"] == len(arrivals), approach
        assert run["gangs_completed"] == len(arrivals), approach
        # kwok ran each completed gang for its run time and ended it Succeeded.
        assert run["gangs_succeeded"] == len(arrivals), approach
        assert run["timeouts"] == 0 and run["unfinished_lives"] == 0
        # Every gang's members were created, and that took part of its latency.
        creation, latency = run["creation_ms"], run["latency_ms"]
        assert creation["n"] == len(arrivals), approach
        assert 0 < creation["max"] <= latency["max"], (creation, latency)
        assert run["warmup"]["completed"] and run["warmup"]["cleaned_up"]
        # Open loop: no gang was submitted long after its planned time.
        assert run["replay_lag_ms"] < 2000, run["replay_lag_ms"]
        # The writes include the bindings of every member.
        members = sum(a.size for a in arrivals)
        assert run["writes"].get("POST pods/binding", 0) >= members, run["writes"]
    footing = doc["preset"]["footing"]
    # Each approach samples nodes as it ships (None: its own configuration), and says so.
    assert (footing["client_qps"], footing["percentage_of_nodes_to_score"]) == (1000.0, None)
    # The extender approach ran as deploy/ runs it (split), and the report says so.
    assert footing["extender_scope"] == "split"
    assert doc["environment"]["versions"]["kubernetes"].startswith("v1.37")
    report = (tmp_path / "report.md").read_text()
    assert scenario.digest(arrivals) in report and "native" in report
    assert "as deploy/ does (split" in report
    assert "percentageOfNodesToScore as each approach ships" in report
