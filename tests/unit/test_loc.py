"""Lines of policy code: docstrings, comments and blank lines never count."""

from __future__ import annotations

import pytest

from escher_harness.bench.loc import go_loc, python_loc

PY = '''"""Module docstring
over two lines."""

import os  # a comment


def f(x):
    """A docstring that closes on a line of text."""
    # a comment line
    return (x +
            1)
'''

GO = """// Package x does y.
package x

/* a block
   comment */
func f() int {
	return 1 // trailing
}
"""


@pytest.mark.parametrize(("count", "source", "expected"), [(python_loc, PY, 4), (go_loc, GO, 4)])
def test_counts_only_code(count, source, expected) -> None:  # type: ignore[no-untyped-def]
    assert count(source) == expected
