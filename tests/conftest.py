"""Shared test set-up: the local control plane's fixtures (local_cluster, shared_cluster), and
the fuzz tier's record: what the fuzzers did, tallied (requests made by outcome, 5xx answers,
failed checks, state-machine steps), printed at the end of the run.

The record is kept here, not in tests/fuzz, because under pytest-xdist (`make test` runs
workers) each worker tallies its own tests and hands its counts to the controller, which
loads only this conftest, sums them and prints them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

pytest_plugins = ["escher_harness.pytest_plugin"]

TALLY = pytest.StashKey[Counter[str]]()


@pytest.fixture(scope="session")
def tally(request: pytest.FixtureRequest) -> Counter[str]:
    return request.config.stash.setdefault(TALLY, Counter())


def pytest_sessionfinish(session: pytest.Session) -> None:
    output = getattr(session.config, "workeroutput", None)  # set on an xdist worker only
    if output is not None:
        output["fuzz_tally"] = dict(session.config.stash.get(TALLY, Counter()))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    counts = node.config.stash.setdefault(TALLY, Counter())
    counts.update(getattr(node, "workeroutput", {}).get("fuzz_tally", {}))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    counts = terminalreporter.config.stash.get(TALLY, None)
    if not counts:
        return
    from fuzz.campaign import EXAMPLES, RUNS, SEED, STEPS

    terminalreporter.section("fuzz")
    terminalreporter.write_line(
        f"seed {SEED}; {EXAMPLES} examples per operation and mode; "
        f"state machines: {RUNS} runs of up to {STEPS} steps"
    )
    for key, n in sorted(counts.items()):
        terminalreporter.write_line(f"{key}: {n}")
