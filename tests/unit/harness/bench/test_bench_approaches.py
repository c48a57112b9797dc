"""The gang benchmark's approaches: the registry (escher_harness.bench.approaches.registry)
is the one list, and every parallel list follows it, as tests/process/test_process_crds.py
pins the ESL kinds to theirs: the façade's names, the CLI's choices (bench gang and bench
gang-timeline), the report's order, extenders and colours, the policy-lines count, each
family module's docstring and the approaches' table in docs/gangs.md. No cluster.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path

import pytest

from escher_harness import cli
from escher_harness.bench import approaches, gang_bench, gang_report, gang_timeline
from escher_harness.bench.approaches import registry
from escher_harness.bench.approaches.base import Approach

NAMES = [e.name for e in registry.REGISTRY]
DOCS = Path(__file__).resolve().parents[4] / "docs" / "gangs.md"


def test_each_approach_has_one_row_and_its_own_colour() -> None:
    assert len(set(NAMES)) == len(NAMES)
    colours = [e.colour for e in registry.REGISTRY]
    assert len(set(colours)) == len(colours)
    assert all(isinstance(e.approach, Approach) for e in registry.REGISTRY)


def test_the_subsets_are_the_registrys_in_its_order() -> None:
    for subset in (registry.POLICY, registry.EXTENDERS, registry.TIMELINE):
        assert list(subset) == [n for n in NAMES if n in subset]
    assert approaches.APPROACHES == registry.APPROACHES == tuple(NAMES)
    assert approaches.POLICY == registry.POLICY
    assert gang_report.EXTENDERS == registry.EXTENDERS
    assert gang_timeline.APPROACHES == registry.TIMELINE


def test_the_report_runs_and_counts_every_approach_in_the_registrys_order() -> None:
    assert inspect.signature(gang_bench.run).parameters["which"].default == tuple(NAMES)
    assert list(approaches.policy_loc()) == NAMES


def _parse(*given: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_commands(parser.add_subparsers(dest="command"))
    return parser.parse_args(["bench", *given])


def test_the_cli_takes_the_registrys_names() -> None:
    timeline = ",".join(registry.TIMELINE)
    assert _parse("gang-timeline", "--out", "o", "--approaches", timeline).approaches == list(
        registry.TIMELINE
    )
    others = [n for n in NAMES if n not in registry.TIMELINE]
    for name in others:
        with pytest.raises(SystemExit):
            _parse("gang-timeline", "--out", "o", "--approaches", name)
    # bench gang checks its names when it runs, against the façade's APPROACHES (above).
    assert _parse("gang", "--out", "o", "--approaches", ",".join(NAMES)).approaches == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_each_approach_is_described_by_its_module(name: str) -> None:
    module = sys.modules[type(registry.get(name)).__module__]
    assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", module.__doc__ or "")


def test_the_docs_table_lists_the_registry() -> None:
    text = DOCS.read_text()
    table = text[text.index("| approach | what schedules the gang |") :].split("\n\n")[0]
    assert re.findall(r"^\| `([\w-]+)` \|", table, re.M) == NAMES


def test_an_unknown_name_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="choose from extender, extender-gated"):
        registry.get("kueue")
