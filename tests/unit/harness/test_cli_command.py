"""The bench gang command line recorded in a report is the one given (escher_harness.cli)."""

from __future__ import annotations

import argparse

import pytest

from escher_harness import cli


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
