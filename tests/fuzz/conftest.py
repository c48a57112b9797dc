"""The fuzz tier's record: what the fuzzers did, tallied (requests made by outcome, 5xx
answers, failed checks, state-machine steps), printed at the end of the run."""

from __future__ import annotations

from collections import Counter

import pytest

from .campaign import EXAMPLES, RUNS, SEED, STEPS

TALLY = pytest.StashKey[Counter[str]]()


@pytest.fixture(scope="session")
def tally(request: pytest.FixtureRequest) -> Counter[str]:
    return request.config.stash.setdefault(TALLY, Counter())


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    counts = terminalreporter.config.stash.get(TALLY, None)
    if not counts:
        return
    terminalreporter.section("fuzz")
    terminalreporter.write_line(
        f"seed {SEED}; {EXAMPLES} examples per operation and mode; "
        f"state machines: {RUNS} runs of up to {STEPS} steps"
    )
    for key, n in sorted(counts.items()):
        terminalreporter.write_line(f"{key}: {n}")
