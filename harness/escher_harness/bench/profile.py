"""A sampling profile of a running extender, taken with py-spy, and its top frames.

py-spy reads the target's memory from outside (ptrace), so the extender runs unmodified and
pays only for being sampled. The recording is py-spy's raw format (collapsed stacks: one line
per distinct stack, frames root first, then the sample count). `top_frames` turns it into the
frames holding the most samples themselves (self) and on the stack (total). Called by
escher_harness.bench.throughput during one extender-mode run.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

RATE: Final = 250  # samples per second


@dataclass(frozen=True)
class Frame:
    frame: str  # "function (module.py:line)"
    self_share: float  # fraction of samples with this frame on top
    total_share: float  # fraction of samples with this frame anywhere on the stack


class Recording:
    """py-spy recording `pid` into `out` until `stop()`."""

    def __init__(self, pid: int, out: Path) -> None:
        exe = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which(
            "py-spy"
        )
        if exe is None:
            raise RuntimeError("py-spy is not installed (it comes with the harness)")
        self.out = out
        self._log = out.with_suffix(".log").open("wb")
        self._proc = subprocess.Popen(
            [
                *(exe, "record", "--pid", str(pid), "--format", "raw", "--output", str(out)),
                *("--rate", str(RATE), "--nonblocking"),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        """py-spy writes its file when interrupted."""
        self._proc.send_signal(signal.SIGINT)
        try:
            self._proc.wait(30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._log.close()


def top_frames(collapsed: str, n: int = 15) -> list[Frame]:
    """The `n` frames with the most self samples, from py-spy's raw (collapsed) output."""
    self_counts: dict[str, int] = {}
    total_counts: dict[str, int] = {}
    samples = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        samples += count
        self_counts[frames[-1]] = self_counts.get(frames[-1], 0) + count
        for frame in set(frames):
            total_counts[frame] = total_counts.get(frame, 0) + count
    if samples == 0:
        return []
    ranked = sorted(self_counts, key=lambda f: self_counts[f], reverse=True)[:n]
    return [
        Frame(f, round(self_counts[f] / samples, 4), round(total_counts[f] / samples, 4))
        for f in ranked
    ]
