"""The ESL benchmark's command line and report, without a cluster: `bench esl` reaches
esl_bench.run with the configuration asked for, and the table shows every scenario of every
approach with the figures that apply to it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from escher_harness.bench import esl_bench
from extender import cli


@pytest.mark.parametrize(
    ("argv", "trials", "timeout"),
    [
        (["--quick"], 2, 3.0),
        ([], 5, 5.0),
        (["--trials", "9"], 9, 5.0),
    ],
)
def test_bench_esl_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, argv: list[str], trials: int, timeout: float
) -> None:
    seen: list[tuple[Path, esl_bench.Config]] = []
    monkeypatch.setattr(esl_bench, "run", lambda out, cfg: seen.append((out, cfg)) or 0)
    assert cli.main(["bench", "esl", "--out", str(tmp_path), *argv]) == 0
    ((out, cfg),) = seen
    assert (out, cfg.trials, cfg.soft_timeout) == (tmp_path, trials, timeout)


def test_table_lists_each_scenario_per_approach() -> None:
    def result(p50: float, **extra: Any) -> dict[str, Any]:
        return {"seconds": {"n": 2, "p50": p50, "p90": p50, "p99": p50, "max": p50}, **extra}

    results = {
        "extender": {
            "soft, first choice full": result(0.02, on_first_choice=0.0, resubmitted=0.0),
            "bin-packing, no ESL": result(0.05, nodes_used=4.0),
        },
        "pure": {"soft, first choice full": result(5.2, on_first_choice=0.0, resubmitted=2.0)},
    }
    lines = esl_bench.table(results).splitlines()
    assert lines[2] == "| soft, first choice full | extender | 0.02 | 0.02 | 0.02 | 0.0 | 0.0 |  |"
    assert lines[3] == "| soft, first choice full | pure | 5.2 | 5.2 | 5.2 | 0.0 | 2.0 |  |"
    assert lines[4] == "| bin-packing, no ESL | extender | 0.05 | 0.05 | 0.05 |  |  | 4.0 |"
    assert len(lines) == 5
