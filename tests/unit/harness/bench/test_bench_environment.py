"""What a benchmark keeps of a run (escher_harness.bench.environment): each component's log,
its end when it is long, and nothing for a process whose log is not there. The stall probe,
which starts processes, is tested in tests/process/test_process_stall_probe.py."""

from __future__ import annotations

from pathlib import Path

from escher_harness.bench import environment
from escher_harness.localcluster.processes import ProcessRecord


def record(name: str, log: Path) -> ProcessRecord:
    return ProcessRecord(name, 1, 0, (name,), log, 0, "")


def test_each_log_is_kept_and_a_long_one_by_its_end(tmp_path: Path) -> None:
    short, long, missing = (
        tmp_path / "extender.log",
        tmp_path / "kube-scheduler.log",
        tmp_path / "x",
    )
    short.write_bytes(b"bind refused: no room\n")
    long.write_bytes(b"a" * 3_000_000 + b"the end\n")
    out = tmp_path / "kept"
    environment.keep_logs(
        [record("extender", short), record("kube-scheduler", long), record("x", missing)], out
    )
    assert (out / "extender.log").read_bytes() == b"bind refused: no room\n"
    kept = (out / "kube-scheduler.log").read_bytes()
    assert len(kept) == 2_000_000 and kept.endswith(b"the end\n")
    assert sorted(p.name for p in out.iterdir()) == ["extender.log", "kube-scheduler.log"]
