"""`escher-extender cluster up|down|status` without a cluster: usage errors exit 2, failures
exit 1 with a one-line message and no traceback (escher_harness.localcluster.commands)."""

from __future__ import annotations

from pathlib import Path

import pytest

from escher_harness.localcluster import ClusterSpec, commands
from escher_harness.localcluster.errors import ClusterError
from extender.cli import main


@pytest.mark.parametrize(
    "argv",
    [
        ["cluster", "up", "--dir", "d", "--node-label", "no-equals-sign"],
        ["cluster", "up", "--dir", "d", "--feature-gate", "X=maybe"],
        ["cluster", "up", "--dir", "d", "--mode", "fancy"],
        ["cluster", "up"],
        ["cluster"],
    ],
    ids=["label", "gate", "mode", "no-dir", "no-subcommand"],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert "usage:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "status", "message"),
    [
        (["up", "--node-resource", "gpu=1"], 2, "up: node resource 'gpu' is not an extended"),
        (["up", "--nodes", "-1"], 2, "up: nodes must be >= 0"),
        (["up", "--mode", "extender", "--replicas", "0"], 2, "up: replicas must be >= 1"),
        (["up", "--replicas", "2"], 2, "up: replicas are extender replicas: they need mode"),
        (["up", "--scope", "every-pod"], 2, "up: scope every-pod is a way of calling the extender"),
        (["up"], 1, "up: etcd not found (or not executable) in"),
        (["status"], 1, "status: no cluster in"),
    ],
    ids=[
        "resource",
        "nodes",
        "no-replica",
        "replicas-without-extender",
        "every-pod-without-extender",
        "missing-binary",
        "status",
    ],
)
def test_errors_are_one_line(
    argv: list[str],
    status: int,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("ESCHER_BIN_DIR", str(tmp_path))  # no binaries there
    assert main(["cluster", *argv[:1], "--dir", str(tmp_path / "c"), *argv[1:]]) == status
    err = capsys.readouterr().err
    assert err.startswith(f"escher-extender cluster {message}")
    assert err.count("\n") == 1


def test_down_of_nothing_succeeds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "down", "--dir", str(tmp_path / "none")]) == 0
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize(
    ("flags", "field", "value"),
    [
        ([], "kwok", True),
        (["--no-kwok"], "kwok", False),
        ([], "replicas", 1),
        (["--replicas", "3"], "replicas", 3),
        ([], "scope", "split"),
        (["--scope", "every-pod"], "scope", "every-pod"),
    ],
    ids=[
        "kwok-default",
        "no-kwok",
        "one-replica-default",
        "three-replicas",
        "split-default",
        "every-pod",
    ],
)
def test_flags_reach_the_spec(
    flags: list[str], field: str, value: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs: list[ClusterSpec] = []

    def record(spec: ClusterSpec, **_: object) -> None:
        specs.append(spec)
        raise ClusterError("recorded")

    monkeypatch.setattr(commands, "up", record)
    argv = ["cluster", "up", "--dir", str(tmp_path / "c"), "--mode", "extender", *flags]
    assert main(argv) == 1
    assert [getattr(s, field) for s in specs] == [value]
