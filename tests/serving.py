"""`escher-extender serve` as a process of a test's own: started on a free loopback port with
the given flags, ready (its /readyz answers 200) before the test goes on, stopped after.
Used by the process tier (tests/process/test_process_isolation.py) and the e2e tier (an
extender with --kubernetes-auth beside the cluster's own, tests/e2e/test_crds.py)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from escher_harness.localcluster.ports import allocate_ports


@contextlib.contextmanager
def serving(
    *flags: str, log: Path | None = None, timeout: float = 60.0
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """(its URL, the process); its output goes to `log`, or nowhere."""
    port = allocate_ports({"extender": None})["extender"]
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(log.open("wb")) if log is not None else subprocess.DEVNULL
        proc = subprocess.Popen(
            [sys.executable, "-m", "extender", "serve", "--port", str(port), *flags],
            stdout=out,
            stderr=subprocess.STDOUT if log is not None else subprocess.DEVNULL,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + timeout
            while True:
                try:
                    if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert proc.poll() is None and time.monotonic() < deadline, "serve not ready"
                time.sleep(0.05)
            yield url, proc
        finally:
            proc.terminate()
            proc.wait(30)
