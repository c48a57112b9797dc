"""Every log call of the service passes `extra` keys that logging takes: a key naming one of
LogRecord's own attributes (`name`, `msg`, `args`...) makes the call raise KeyError, so the
record is lost and, in an except block, the handler itself fails (as a reconcile's warning
did with `name`)."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import extender

# LogRecord's own attributes: a key of `extra` that names one makes logging raise KeyError
# ("Attempt to overwrite 'name' in LogRecord"), so the message is lost and the caller fails.
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("n", 0, "p", 0, "m", None, None))) | {
    "message",
    "asctime",
}


def _extra_keys() -> list[tuple[str, int, str]]:
    """Every literal key of an `extra={...}` argument in the service's code."""
    found = []
    for path in sorted(Path(extender.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            for kw in node.keywords:
                if kw.arg == "extra" and isinstance(kw.value, ast.Dict):
                    for key in kw.value.keys:
                        if isinstance(key, ast.Constant) and isinstance(key.value, str):
                            found.append((path.name, node.lineno, key.value))
    return found


def test_no_log_call_passes_an_extra_key_that_logging_refuses() -> None:
    keys = _extra_keys()
    assert len(keys) > 50  # the scan sees the service's log calls
    clashes = [k for k in keys if k[2] in _RECORD_ATTRIBUTES]
    assert clashes == []
