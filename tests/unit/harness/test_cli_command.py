"""The bench command lines (escher_harness.cli): the one recorded in a gang report is the one
given; bench extender's percentage of nodes to score is a whole number from 0 to 100; a CPU
split on one CPU, and an extender share that cannot be given, are refused before anything
runs."""

from __future__ import annotations

import argparse
import os
import signal
import time
from typing import Any

import pytest

from escher_harness import cli
from escher_harness.localcluster import processes


@pytest.mark.parametrize(
    ("given", "recorded"),
    [
        (["--out", "o", "--quick"], "escher-extender bench gang --out o --quick"),
        (["--out", "o"], "escher-extender bench gang --out o --preset standard"),
        (
            ["--out", "o", "--preset", "escher", "--approaches", "extender,native", "--resume"],
            "escher-extender bench gang --approaches extender,native --out o --preset escher "
            "--resume",
        ),
    ],
)
def test_the_recorded_command_is_the_one_given(given: list[str], recorded: str) -> None:
    parser = argparse.ArgumentParser()
    cli.add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "gang", *given])
    assert cli._command(args) == recorded


@pytest.mark.parametrize(
    ("given", "expected"), [([], None), (["--percentage-of-nodes-to-score", "100"], 100)]
)
@pytest.mark.parametrize("bench", ["gang", "extender"])
def test_each_bench_compares_as_shipped_unless_told_to_equalise(
    monkeypatch: pytest.MonkeyPatch, bench: str, given: list[str], expected: int | None
) -> None:
    """None: every approach samples nodes as its own configuration says (as it ships)."""
    from escher_harness.bench import extender_bench, gang_bench

    seen: list[int | None] = []
    monkeypatch.setattr(
        gang_bench,
        "run",
        lambda out, p, *a, **k: seen.append(p.footing.percentage_of_nodes_to_score),
    )
    monkeypatch.setattr(
        extender_bench, "run", lambda out, cfg: seen.append(cfg.percentage_of_nodes_to_score)
    )
    parser = argparse.ArgumentParser()
    cli.add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", bench, "--out", "o", *given])
    args.func(args)
    assert seen == [expected]


@pytest.mark.parametrize(
    ("text", "ok"),
    [("0", 0), ("100", 100), ("42", 42), ("-1", None), ("101", None), ("x", None), ("5.5", None)],
)
def test_bench_extender_takes_a_percentage_of_nodes_to_score_from_0_to_100(
    text: str, ok: int | None
) -> None:
    if ok is None:
        with pytest.raises(argparse.ArgumentTypeError, match="0 to 100"):
            cli._percentage(text)
    else:
        assert cli._percentage(text) == ok


def test_a_terminated_run_stops_what_it_started_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """SIGTERM (timeout(1), a cancelled job) unwinds a bench like Ctrl-C, so the clusters it
    started are stopped by its own clean-up (a terminated `bench gang` left its cluster and
    its load generator running), and the handler before it is back afterwards."""
    stopped = []

    def run(args: argparse.Namespace) -> int:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the signal interrupts this
            return 0
        finally:
            stopped.append(True)

    before = signal.getsignal(signal.SIGTERM)
    status = cli._guarded(run)(argparse.Namespace(command="bench gang"))
    assert status == 130 and stopped == [True]
    assert "interrupted; what it started was stopped" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_cpu_split_on_one_cpu_is_refused_before_anything_runs(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    parser = argparse.ArgumentParser()
    cli.add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "gang", "--quick", "--cpu-split", "--out", str(tmp_path)])
    assert args.func(args) == 1
    assert "a CPU split needs 2 CPUs or more; this process may use 1" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text", ["-21", "20", "x", "1.5"])
def test_an_extender_nice_out_of_range_is_refused_by_the_parser(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    cli.add_commands(parser.add_subparsers(dest="command"))
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "gang", "--quick", "--out", "o", "--extender-nice", text])
    assert "--extender-nice" in capsys.readouterr().err


def test_an_extender_share_that_cannot_be_given_is_refused_before_anything_runs(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    off = tmp_path / "sched_autogroup_enabled"
    off.write_text("0\n")
    monkeypatch.setattr(processes, "_AUTOGROUPS", off)
    out = tmp_path / "out"
    parser = argparse.ArgumentParser()
    cli.add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["bench", "gang", "--quick", "--extender-nice", "-5", "--out", str(out)]
    )
    assert args.extender_nice == -5
    assert args.func(args) == 1
    assert "--extender-nice: an autogroup nice needs Linux's autogroups" in capsys.readouterr().err
    assert not out.exists()
