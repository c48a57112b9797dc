"""The house's size limits (issue 59): no module of the service (extender/) over 600 lines, and
no function of the service or the harness (harness/escher_harness/) over 80 lines. Past them a
module holds more than one concept, or a function more than one step: split it along them.

An AST walk of the source files; each test prints every offender, with its line count. The
walk is proven on snippets below. And no two test modules share a file name, which pytest
cannot collect in one run (a clash that first showed in the clean-clone run)."""

from __future__ import annotations

import ast
from pathlib import Path

import escher_harness
import extender

SERVICE = Path(extender.__file__).parent
HARNESS = Path(escher_harness.__file__).parent
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int, int]]:
    """(qualified name, first line, lines) of each function or method in `source` longer than
    `limit` lines, decorators left out, nested ones counted on their own too."""
    found: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    lines = (child.end_lineno or child.lineno) - child.lineno + 1
                    if lines > limit:
                        found.append((name, child.lineno, lines))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def _sources(root: Path) -> list[tuple[str, str]]:
    return [
        (path.relative_to(root.parent).as_posix(), path.read_text())
        for path in sorted(root.rglob("*.py"))
    ]


def _functions_over(root: Path) -> list[str]:
    return [
        f"{where}:{line} {name} ({lines} lines)"
        for where, source in _sources(root)
        for name, line, lines in long_functions(source)
    ]


def test_no_module_of_the_service_is_over_600_lines() -> None:
    over = [
        f"{where} ({n} lines)"
        for where, source in _sources(SERVICE)
        if (n := len(source.splitlines())) > MAX_MODULE_LINES
    ]
    assert over == [], f"split these modules along their concepts: {over}"


def test_no_function_of_the_service_is_over_80_lines() -> None:
    over = _functions_over(SERVICE)
    assert over == [], f"split these functions into their steps: {over}"


def test_no_function_of_the_harness_is_over_80_lines() -> None:
    over = _functions_over(HARNESS)
    assert over == [], f"split these functions into their steps: {over}"


def test_the_walk_finds_long_functions_and_methods_and_only_those() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(80))
    source = (
        f"def long():\n{body}"  # 81 lines
        f"def short():\n{body[: body.rindex('    x79')]}"  # 80 lines
        f"class C:\n    @property\n    async def long(self):\n{body.replace('    ', '        ')}"
        f"def outer():\n    def inner():\n{body.replace('    ', '        ')}"
    )
    assert long_functions(source) == [
        ("long", 1, 81),
        ("C.long", 164, 81),  # from its def, not its decorator
        ("outer", 245, 82),
        ("outer.inner", 246, 81),
    ]


def duplicate_basenames(paths: list[Path]) -> dict[str, list[Path]]:
    """Test modules sharing a file name: pytest imports each by its basename (rootdir-relative
    packages are not used here), so the second of two cannot be collected in the same run."""
    by_name: dict[str, list[Path]] = {}
    for p in paths:
        by_name.setdefault(p.name, []).append(p)
    return {name: ps for name, ps in by_name.items() if len(ps) > 1}


def test_no_two_test_modules_share_a_file_name() -> None:
    tests = Path(__file__).resolve().parents[1]
    clashes = duplicate_basenames(sorted(tests.rglob("test_*.py")))
    assert not clashes, "\n".join(f"{n}: {[str(p) for p in ps]}" for n, ps in clashes.items())


def test_the_basename_check_finds_a_clash_and_only_that() -> None:
    paths = [Path("unit/a/test_x.py"), Path("e2e/test_x.py"), Path("e2e/test_y.py")]
    assert duplicate_basenames(paths) == {"test_x.py": paths[:2]}
