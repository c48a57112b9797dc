"""docs/esl.md's examples run: each policy's block is executed on both approaches, against a
LedgerBackend over an in-memory ledger of four 4-cpu nodes, with pod creation recorded; the
cluster set-up block compiles and every name it imports exists. An example that drifts from
the API fails here."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from typing import Any

import pytest

from extender.core.ledger import Ledger
from extender.esl.backends import LedgerBackend
from extender.esl.base import PodRequest

D = "escher.io"
DOC = Path(__file__).parents[3] / "docs" / "esl.md"
TEXT = DOC.read_text()
(SETUP,) = re.findall(r"```python setup\n(.*?)```", TEXT, re.S)
# Each example, named after its section.
EXAMPLES = [
    pytest.param(code, id=re.sub(r"\W+", "-", title.lower()).strip("-"))
    for title, body in re.findall(r"^## (.+?)$(.*?)(?=^## |\Z)", TEXT, re.M | re.S)
    for code in re.findall(r"```python\n(.*?)```", body, re.S)
]


def test_the_setup_block_compiles_and_its_imports_exist() -> None:
    tree = ast.parse(compile(SETUP, "docs/esl.md setup", "exec", ast.PyCF_ONLY_AST))
    imported = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name) or importlib.util.find_spec(
                    f"{node.module}.{alias.name}"
                ), f"{node.module}.{alias.name}"
                imported += 1
    assert imported >= 5


def test_every_esl_of_the_registry_has_an_example() -> None:
    from extender.esl.registry import REGISTRY

    codes = [str(p.values[0]) for p in EXAMPLES]
    shown = {m for code in codes for m in re.findall(r"from extender\.esl\.(\w+) import", code)}
    assert set(REGISTRY) <= shown


@pytest.mark.parametrize("in_path", [True, False], ids=["extender", "pure"])
@pytest.mark.parametrize("code", EXAMPLES)
def test_each_example_runs(code: str, in_path: bool) -> None:
    ledger = Ledger(D)
    for i in range(4):
        ledger.upsert_node(f"node-{i}", {}, {"cpu": 4000, "memory": 16 << 30, "pods": 110})
    created: list[PodRequest] = []

    def run_pods(req: PodRequest, n: int, prefix: str) -> list[str]:
        created.extend([req] * n)
        return [f"{prefix}-{i}" for i in range(n)]

    namespace: dict[str, Any] = {
        "backend": LedgerBackend(ledger, D, in_path=in_path),
        "run_pods": run_pods,
    }
    exec(compile(code, "docs/esl.md", "exec"), namespace)
    assert created
    for req in created:  # every pod asks something of the extender's domain
        keys = [*req.limits, *req.labels, *req.annotations]
        assert any(k.startswith(f"{D}/") for k in keys), req
