"""extender.logs.Sampled: a record that comes in bursts is written at most so often, and the
rest are counted into one record at the window's end."""

from __future__ import annotations

import asyncio
import logging

import pytest

from extender.logs import Sampled

WINDOW = 0.05


def records(caplog: pytest.LogCaptureFixture) -> list[tuple[str, dict[str, object]]]:
    fields = ("i", "left_out", "seconds", "last")
    return [
        (r.getMessage(), {f: getattr(r, f) for f in fields if hasattr(r, f)})
        for r in caplog.records
    ]


@pytest.mark.parametrize(
    ("per_window", "burst", "expected"),
    [
        # Under the limit: each is written, no summary.
        (3, 2, [("bind refused", {"i": 0}), ("bind refused", {"i": 1})]),
        (2, 2, [("bind refused", {"i": 0}), ("bind refused", {"i": 1})]),
        # Over it: the first per_window, then one record for the rest, with the last's fields.
        (
            2,
            5,
            [
                ("bind refused", {"i": 0}),
                ("bind refused", {"i": 1}),
                (
                    "bind refused: more, not each logged",
                    {"left_out": 3, "seconds": WINDOW, "last": {"i": 4}},
                ),
            ],
        ),
    ],
)
def test_a_burst_is_written_up_to_the_limit_and_the_rest_counted(
    caplog: pytest.LogCaptureFixture,
    per_window: int,
    burst: int,
    expected: list[tuple[str, dict[str, object]]],
) -> None:
    log = logging.getLogger("test.sampled")
    sampled = Sampled(log, "bind refused", per_window=per_window, window=WINDOW)

    async def scenario() -> None:
        for i in range(burst):
            sampled.info(i=i)
        await asyncio.sleep(WINDOW * 3)  # the window ends: its summary is written

    with caplog.at_level(logging.INFO, logger="test.sampled"):
        asyncio.run(scenario())
    assert records(caplog) == expected


def test_a_new_window_writes_again_after_the_last_ones_summary(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("test.sampled")
    sampled = Sampled(log, "bind refused", per_window=1, window=WINDOW)

    async def scenario() -> None:
        sampled.info(i=0)
        sampled.info(i=1)  # left out, summarised when the window ends
        await asyncio.sleep(WINDOW * 3)
        sampled.info(i=2)  # a new window

    with caplog.at_level(logging.INFO, logger="test.sampled"):
        asyncio.run(scenario())
    assert records(caplog) == [
        ("bind refused", {"i": 0}),
        (
            "bind refused: more, not each logged",
            {"left_out": 1, "seconds": WINDOW, "last": {"i": 1}},
        ),
        ("bind refused", {"i": 2}),
    ]


@pytest.mark.parametrize(("per_window", "window"), [(0, 1.0), (1, 0.0), (1, -1.0)])
def test_a_limit_that_writes_nothing_is_refused(per_window: int, window: float) -> None:
    with pytest.raises(ValueError, match="per_window >= 1 and window > 0"):
        Sampled(logging.getLogger("test.sampled"), "m", per_window=per_window, window=window)
