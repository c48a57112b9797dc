"""`escher-extender serve`: its flags are the Settings fields, generated, never a second list."""

from __future__ import annotations

import argparse
import contextlib
from operator import attrgetter
from pathlib import Path

import pytest

from extender import cli
from extender.cli import build_parser
from extender.settings import FLAT, GROUPS, Settings


def serve_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = sub.choices["serve"]
    return parser


def settings(*argv: str) -> Settings:
    args = build_parser().parse_args(["serve", *argv])
    return Settings(_cli_settings_source=args.settings(parsed_args=args))


def test_every_setting_is_a_flag_with_its_description() -> None:
    flags = {
        opt: action.help or ""
        for action in serve_parser()._actions
        for opt in action.option_strings
    }
    for name, where in FLAT.items():
        group, *inner = where
        field = Settings.model_fields[group]
        field = GROUPS[group].model_fields[inner[0]] if inner else field
        flag = "--" + name.replace("_", "-")
        assert flag in flags, f"{name} has no flag"
        assert field.description and field.description in flags[flag]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ((), {"mode": "extender", "port": 8888, "verbs_http2": True, "gc_freeze": True}),
        (("--no-gc-freeze",), {"gc_freeze": False}),
        (("--mode", "pure", "--port", "9000"), {"mode": "pure", "port": 9000}),
        (("--no-verbs-http2", "--leader-elect"), {"verbs_http2": False, "leader_elect": True}),
        (("--tls-cert-file", "/c", "--tls-key-file", "/k"), {"tls_cert_file": Path("/c")}),
        (("--resource-domain", "example.com"), {"resource_domain": "example.com"}),
        (("--kube-qps", "1000", "--kube-burst", "2000"), {"kube_qps": 1000.0, "kube_burst": 2000}),
    ],
)
def test_flags_set_their_fields(argv: tuple[str, ...], expected: dict[str, object]) -> None:
    s = settings(*argv)
    assert {k: attrgetter(".".join(FLAT[k]))(s) for k in expected} == expected


def test_a_flag_overrides_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ESCHER_PORT", "7000")
    monkeypatch.setenv("ESCHER_MODE", "pure")
    s = settings("--port", "7001")
    assert (s.listen.port, s.mode) == (7001, "pure")


@pytest.mark.parametrize(
    ("config", "status", "out", "err"),
    [
        ("scheduler-config/extender-split.yaml", 0, "the extender's entries are as it needs them",
         ""),
        ("scheduler-config/pure.yaml", 0, "no entry calls the extender", ""),
        ("bad.yaml", 1, "", "extenders[0].bindVerb: missing"),
        ("missing.yaml", 2, "", "No such file"),
        ("list.yaml", 2, "", "not a KubeSchedulerConfiguration"),
    ],
)  # fmt: skip
def test_check_scheduler_config_says_each_mistake_and_fails(
    config: str, status: int, out: str, err: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from extender.cli import main

    repo = Path(__file__).resolve().parents[2]
    (tmp_path / "scheduler-config").symlink_to(repo / "scheduler-config")
    (tmp_path / "bad.yaml").write_text(
        "extenders:\n- {urlPrefix: x, filterVerb: filter, httpTimeout: 15s,\n"
        "   managedResources: [{name: scheduling.escher.io/gang, ignoredByScheduler: true}]}\n"
        "percentageOfNodesToScore: 100\n"
    )
    (tmp_path / "list.yaml").write_text("- 1\n")
    monkeypatch.chdir(tmp_path)
    assert main(["check-scheduler-config", config]) == status
    got = capsys.readouterr()
    assert out in got.out and err in got.err
    assert (got.out == "") == (out == "")


@pytest.mark.parametrize(
    ("argv", "loads"),
    [
        (["check-scheduler-config", "scheduler-config/extender-split.yaml"], False),
        (["serve", "--help"], False),
        (["--help"], True),  # the usage lists every command, the plugins' too
        (["cluster", "--help"], True),
    ],
)
def test_the_services_commands_start_without_the_plugins(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], loads: bool
) -> None:
    loaded: list[str] = []

    def entry_points(group: str) -> list[object]:
        loaded.append(group)
        return []

    monkeypatch.setattr(cli, "entry_points", entry_points)
    monkeypatch.chdir(Path(__file__).parents[2])
    with contextlib.suppress(SystemExit):  # --help, or a command no plugin brought
        cli.main(argv)
    assert bool(loaded) == loads, loaded
