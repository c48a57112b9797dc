"""docs/esl.md's examples run: each policy's block is executed against an in-memory backend
(a ledger of four 4-cpu nodes) with pod creation recorded, and the cluster set-up block at
least compiles. An example that drifts from the API fails here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from extender.esl.backends import LedgerBackend
from extender.esl.base import PodRequest
from extender.ledger import Ledger

DOC = Path(__file__).parents[2] / "docs" / "esl.md"
BLOCKS = re.findall(r"```python( setup)?\n(.*?)```", DOC.read_text(), re.S)


def test_the_setup_block_compiles() -> None:
    (setup,) = [code for tag, code in BLOCKS if tag]
    compile(setup, "docs/esl.md setup", "exec")


@pytest.mark.parametrize("code", [code for tag, code in BLOCKS if not tag])
def test_each_example_runs(code: str) -> None:
    ledger = Ledger("escher.io")
    for i in range(4):
        ledger.upsert_node(f"node-{i}", {}, {"cpu": 4000, "memory": 16 << 30, "pods": 110})
    created: list[PodRequest] = []

    def run_pods(req: PodRequest, n: int, prefix: str) -> list[str]:
        created.extend([req] * n)
        return [f"{prefix}-{i}" for i in range(n)]

    namespace: dict[str, Any] = {
        "backend": LedgerBackend(ledger, "escher.io"),
        "run_pods": run_pods,
    }
    exec(compile(code, "docs/esl.md", "exec"), namespace)
    assert created and all(
        any(k.startswith("escher.io/") for k in req.limits) for req in created
    ), created
