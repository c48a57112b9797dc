"""Logging of the service: its set-up, structured JSON lines (or plain text for humans), and
`Sampled`, a record that may come in bursts.

`configure` is called once by extender.cli before the service starts; modules log with the
stdlib logging module and pass structured fields with `extra=`. A record written per pod of a
burst (a gang's 1,024 refused binds when its reservation expires, or a client sending bad
binds as fast as it can) is a flood for whoever reads the log and written on the event loop's
thread, so such a record is `Sampled` (extender.http.verbs).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

from pythonjsonlogger.json import JsonFormatter


def configure(level: str = "INFO", json_lines: bool = True) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if json_lines:
        handler.setFormatter(
            JsonFormatter(
                "%(asctime)s %(levelname)s %(name)s %(message)s",
                rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            )
        )
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # One line per API request is not a log: the metrics count them.
    logging.getLogger("httpx").setLevel(logging.WARNING)


class Sampled:
    """One message logged (INFO) at most `per_window` times in `window` seconds; the records
    past that are counted, and when the window ends one record says how many were left out,
    with the fields of the last of them. Called on the event loop (the summary is a timer on
    it); what it keeps is bounded: a count and one record's fields."""

    def __init__(
        self, logger: logging.Logger, message: str, per_window: int = 20, window: float = 1.0
    ) -> None:
        if per_window < 1 or window <= 0:
            raise ValueError(f"per_window >= 1 and window > 0, not {per_window} and {window}")
        self._logger = logger
        self.message = message
        self.per_window = per_window
        self.window = window
        self._start = float("-inf")  # the window's start, on the loop's clock
        self._logged = 0  # records written in this window
        self._left_out = 0  # ... and counted only
        self._last: dict[str, Any] = {}
        self._summary: asyncio.TimerHandle | None = None

    def info(self, **fields: Any) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        if now - self._start >= self.window:
            self._summarise()
            self._start, self._logged = now, 0
        if self._logged < self.per_window:
            self._logged += 1
            self._logger.info(self.message, extra=fields)
            return
        self._left_out += 1
        self._last = fields
        if self._summary is None:
            self._summary = loop.call_at(self._start + self.window, self._summarise)

    def _summarise(self) -> None:
        if self._summary is not None:
            self._summary.cancel()
            self._summary = None
        if self._left_out:
            self._logger.info(
                f"{self.message}: more, not each logged",
                extra={"left_out": self._left_out, "seconds": self.window, "last": self._last},
            )
            self._left_out, self._last = 0, {}
