"""The extender's stall probe (escher_harness.bench.environment.ExtenderSampler): the
benchmark's own threads do not slow it, it runs in a session of its own and on the
extender's CPUs. In the process tier: it starts the probe's process and an HTTP server."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import httpx

from escher_harness.bench import environment
from escher_harness.localcluster import processes
from escher_harness.localcluster.ports import allocate_ports
from escher_harness.localcluster.processes import ProcessRecord


def record(name: str, log: Path) -> ProcessRecord:
    return ProcessRecord(name, 1, 0, (name,), log, 0, "")


def test_the_stall_probe_is_not_held_by_the_benchmarks_own_threads(tmp_path: Path) -> None:
    """The /healthz probe runs in a process of its own: a benchmark thread that holds the
    GIL (here for half a second at a time) does not lengthen its answers, as it did a probe
    thread's, which waited for the GIL at every answer."""
    (tmp_path / "healthz").write_text("ok")
    port = allocate_ports({"probed": None})["probed"]
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    server = processes.spawn(
        "probed", argv, log=tmp_path / "server.log", port=port, health_url=f"{url}/healthz"
    )
    try:
        deadline = time.monotonic() + 10
        while True:  # the server is up
            try:
                httpx.get(f"{url}/healthz")
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        sampler = environment.ExtenderSampler(url, server)
        switch = sys.getswitchinterval()
        with sampler:
            # Its own session, so its own CPU share (autogroup), not the benchmark's.
            probe = sampler._probe.pid
            assert probe is not None and os.getsid(probe) == probe != os.getsid(0)
            sys.setswitchinterval(0.5)
            try:
                hog = threading.Thread(target=_compute, args=(2.0,))
                hog.start()
                hog.join()
            finally:
                sys.setswitchinterval(switch)
            time.sleep(0.3)
        summary = sampler.summary()
    finally:
        processes.stop(server)
    assert summary["healthz_failures"] == 0
    # Every 50 ms through 2.3 s, some 40 answers; a probe held by the GIL made 6. Its
    # slowest answer in a thread was over the 500 ms slice.
    assert summary["healthz_probes"] >= 15
    assert summary["longest_stall_ms"] < 400
    assert summary["peak_rss_mib"] > 0


def test_the_stall_probe_runs_on_the_cpus_it_is_given(tmp_path: Path) -> None:
    """With the extender on CPUs of its own (a CPU split), the probe runs there too, and the
    benchmark's thread that started it keeps its own CPUs."""
    before = os.sched_getaffinity(0)
    one = frozenset({max(before)})
    port = allocate_ports({"nobody": None})["nobody"]  # refused: counted as failures
    sampler = environment.ExtenderSampler(
        f"http://127.0.0.1:{port}", record("extender", tmp_path / "x"), cpus=one
    )
    with sampler:
        probe = sampler._probe.pid
        assert probe is not None and os.sched_getaffinity(probe) == one
        assert os.sched_getaffinity(0) == before
        time.sleep(0.2)
    assert sampler.summary()["healthz_failures"] > 0


def _compute(seconds: float) -> None:
    """Pure Python for `seconds`: it holds the GIL but at the switch interval."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
