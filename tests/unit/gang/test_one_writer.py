"""One writer per state: a gang's state (GangState, its Members and Slots) changes only
through GangState's own methods, in extender/gang/state.py. The planner and the nominations
return what should change; no other module of the service assigns, augments, deletes or
mutates in place (`.add`, `.pop`...) a field of them.

The scan reads every module of extender/ that imports from extender.gang (a module that
names no part of it holds no GangState) and flags `<x>.<field> = ...`, `<x>.<field> += ...`,
`<x>.<field>[k] = ...`, `del <x>.<field>[k]` and `<x>.<field>.<mutator>(...)` for the
fields of the three, but not `self.<field>` (outside state.py, `self` is never one of them).
The checker is proven by breaking it on snippets below."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import extender
from extender.gang.state import GangState, Member, Slot

ROOT = Path(extender.__file__).parent
STATE = ROOT / "gang" / "state.py"

FIELDS = frozenset(
    {f.name for f in dataclasses.fields(GangState)}
    | set(Member.__struct_fields__)
    | set(Slot.__struct_fields__)
)
# Methods that change a dict, set or list in place.
MUTATORS = frozenset(
    {"add", "discard", "pop", "popitem", "clear", "update", "setdefault", "remove"}
    | {"append", "extend", "insert", "sort", "reverse", "difference_update"}
    | {"intersection_update", "symmetric_difference_update"}
)


def _field(node: ast.expr) -> ast.Attribute | None:
    """`node` as `<x>.<field>` of the gang's state (through a subscript), else None."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if not isinstance(node, ast.Attribute) or node.attr not in FIELDS:
        return None
    if isinstance(node.value, ast.Name) and node.value.id == "self":
        return None
    return node


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign | ast.Delete):
        targets = node.targets
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        targets = [node.target]
    else:
        return []
    return [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple | ast.List) else [t])]


def writes(source: str) -> list[str]:
    """The writes of the gang's state's fields in `source`, as `line: code`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        hits = [t for t in _targets(node) if _field(t) is not None]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATORS
            and _field(node.func.value) is not None
        ):
            hits.append(node.func)
        found += [f"{node.lineno}: {ast.unparse(h)}" for h in hits]
    return found


def _names_the_gang(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("extender.gang"):
            return True
        if isinstance(node, ast.Import) and any(
            a.name.startswith("extender.gang") for a in node.names
        ):
            return True
    return False


def test_no_module_but_state_writes_a_gangs_state() -> None:
    scanned, found = [], []
    for path in sorted(ROOT.rglob("*.py")):
        source = path.read_text()
        if path == STATE or not _names_the_gang(ast.parse(source)):
            continue
        scanned.append(path.relative_to(ROOT).as_posix())
        found += [f"{path.relative_to(ROOT)}:{w}" for w in writes(source)]
    # The scan sees the modules that hold a gang's state.
    assert {"gang/manager.py", "gang/planning.py", "gang/nominations.py"} <= set(scanned)
    assert {"gang/places.py", "gang/gate.py", "gang/status.py"} <= set(scanned)
    assert found == [], "change a gang's state through GangState's methods"


@pytest.mark.parametrize(
    "code",
    [
        "g.phase = Phase.BOUND",
        "g.attempts += 1",
        "g.reason: str = ''",
        "g.slots, g.places = {}, {}",
        "g.nominated[uid] = node",
        "del g.nominated[uid]",
        "g.passed.add(uid)",
        "g.landed.pop(uid, None)",
        "gang.members.clear()",
        "m.excluded = m.excluded | {node}",
        "m.feasible = frozenset(nodes)",
        "slot.node = name",
        "s.member = uid",
    ],
)
def test_the_scan_flags_a_write_of_a_field(code: str) -> None:
    assert writes(code), code


@pytest.mark.parametrize(
    "code",
    [
        "self.reason = why",  # a class of its own, not a GangState
        "x = g.phase",
        "g.barrier.arrive(uid)",  # the barrier's own method
        "g.reserve(change)",
        "self._short.add(g.key)",
        "places.move(g, m, slot, nodes, ledger)",
        "g.members.get(uid)",
    ],
)
def test_the_scan_lets_reads_and_methods_be(code: str) -> None:
    assert writes(code) == []
