"""What a benchmark records about where it ran: versions, cores, load, CPU spent.

- `versions()`: Kubernetes (kube-apiserver and kube-scheduler), the Coscheduling peer's
  scheduler-plugins release (its go.mod pin) and the Kubernetes it is built against, kwok,
  etcd, this package and the repository's commit, Python and locust.
- `LoadSampler`: the 1-minute load average, sampled while a run goes on (min, mean, max).
- `cpu_seconds(pid)`: user + system CPU a process has used (from /proc), read before its
  cluster is stopped, so each component's share of the machine is on record.
- `ExtenderSampler`: while a run goes on, the extender's peak resident memory (its process
  group, sampled every second) and its longest event-loop stall as /healthz shows it: a
  probe every 50 ms (bench/stall.py's method, paced so it costs the shared cores little),
  the slowest answer. /healthz is O(1) on the loop, so a slow answer is time the loop was
  held (plus the probe's own round trip); a stall shorter than the pacing may be caught
  only in part. The probe runs in a process and a session of its own: in a thread of the
  benchmark's, it waited for the GIL behind the pod watch and the workload's threads, and
  answers came back up to 96 ms later than the extender's own loop lag said it was held;
  in the benchmark's session it shared that session's CPU share (Linux autogroups).
- `keep_logs(processes, dir)`: each component's log (its last 2 MB) before its cluster is
  stopped, so a run's refusals and errors can be read after it.
The machine is shared and noisy: this is what lets a reader judge a figure. Called by
escher_harness.bench.gang_bench and escher_harness.bench.throughput.
"""

from __future__ import annotations

import importlib.metadata
import multiprocessing
import os
import platform
import re
import statistics
import subprocess
import threading
import time
from collections.abc import Iterable
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import httpx

from escher_harness.localcluster.binaries import bin_dir
from escher_harness.localcluster.cpus import starting_on
from escher_harness.localcluster.paths import REPO_ROOT
from escher_harness.localcluster.processes import ProcessRecord, rss_bytes

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _first_line(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({e})"
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else "unknown"


def _version_in(text: str) -> str:
    m = re.search(r"v?\d+\.\d+\.\d+", text)
    return m.group(0) if m else text


def _pin(gomod: Path, module: str) -> str | None:
    try:
        m = re.search(rf"^require {re.escape(module)} (\S+)", gomod.read_text(), re.MULTILINE)
    except OSError:
        return None
    return m.group(1) if m else None


def _package(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def versions() -> dict[str, Any]:
    b = bin_dir()
    commit = _first_line(["git", "-C", str(REPO_ROOT), "rev-parse", "--short=12", "HEAD"])
    dirty = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    plugins = b / "kube-scheduler-plugins"
    return {
        "kubernetes": _version_in(_first_line([str(b / "kube-apiserver"), "--version"])),
        "kube-scheduler": _version_in(_first_line([str(b / "kube-scheduler"), "--version"])),
        "scheduler-plugins": _pin(
            REPO_ROOT / "hack" / "scheduler-plugins" / "go.mod", "sigs.k8s.io/scheduler-plugins"
        ),
        "scheduler-plugins built on kubernetes": _version_in(
            _first_line([str(plugins), "--version"])
        )
        if plugins.exists()
        else None,
        "kwok": _version_in(_first_line([str(b / "kwok"), "--version"])),
        "etcd": _version_in(_first_line([str(b / "etcd"), "--version"])),
        "escher-extender": _package("escher-extender"),
        "escher-harness": _package("escher-harness"),
        "commit": commit + ("-dirty" if dirty else ""),
        "python": platform.python_version(),
        "locust": _package("locust"),
    }


def machine() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of `pid` and its waited-for children; None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    # utime, stime, cutime, cstime: fields 14-17 of proc(5), 12-15 after the comm.
    return round(sum(int(f) for f in fields[11:15]) / _CLK_TCK, 2)


class LoadSampler:
    """Samples the 1-minute load average every `every` seconds in a thread until stopped."""

    def __init__(self, every: float = 2.0) -> None:
        self.every = every
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(self.every + 1)

    def _run(self) -> None:
        while True:
            self.samples.append(os.getloadavg()[0])
            if self._stop.wait(self.every):
                return

    def summary(self) -> dict[str, float]:
        s = self.samples or [os.getloadavg()[0]]
        return {
            "min": round(min(s), 2),
            "mean": round(statistics.fmean(s), 2),
            "max": round(max(s), 2),
        }


class ExtenderSampler:
    """Peak RSS and the slowest /healthz answer of the extender at `url`, from `__enter__`
    to `__exit__`: the memory in a thread, the probe in a process of its own (see the
    module's notes)."""

    def __init__(
        self,
        url: str,
        process: ProcessRecord,
        every: float = 0.05,
        cpus: frozenset[int] | None = None,
    ) -> None:
        self.url, self.process, self.every = url, process, every
        # The probe runs on the extender's CPUs (a CPU split's): on the other half it would
        # measure how long that half kept it from reading the answer.
        self.cpus = cpus
        self.peak_rss = 0
        self.worst_healthz = 0.0
        self.probes = self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        ctx = multiprocessing.get_context("spawn")
        self._probe_started, self._probe_stop = ctx.Event(), ctx.Event()
        self._results, sink = ctx.Pipe(duplex=False)
        self._probe = ctx.Process(
            target=probe_healthz,
            args=(url, every, self._probe_started, self._probe_stop, sink),
            daemon=True,
        )

    def __enter__(self) -> ExtenderSampler:
        with starting_on(self.cpus):
            self._probe.start()
        # The run is probed from its start: the probe's interpreter takes a moment to start.
        self._probe_started.wait(30)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._probe_stop.set()
        self._thread.join(10)
        if self._results.poll(30):
            self.worst_healthz, self.probes, self.failures = self._results.recv()
        self._probe.join(10)
        if self._probe.is_alive():
            self._probe.kill()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_rss = max(self.peak_rss, rss_bytes(self.process))
            self._stop.wait(1.0)

    def summary(self) -> dict[str, float | int]:
        return {
            "peak_rss_mib": round(self.peak_rss / 2**20, 1),
            "longest_stall_ms": round(self.worst_healthz * 1000, 1),
            "healthz_probes": self.probes,
            "healthz_failures": self.failures,
        }


def probe_healthz(url: str, every: float, started: Event, stop: Event, results: Connection) -> None:
    """GET `url`/healthz every `every` seconds until `stop`, then send (the slowest answer
    in seconds, answers, failures) to `results`; `started` is set once it is about to send
    the first. ExtenderSampler's probe process."""
    # A session of its own, so an autogroup of its own: in the benchmark's session the probe
    # shared one CPU share with the pod watch and the workload's threads, and its answers
    # came back late by however long those kept it from being run.
    os.setsid()
    worst, probes, failures = 0.0, 0, 0
    with httpx.Client(base_url=url, timeout=30) as c:
        started.set()
        while not stop.is_set():
            start = time.perf_counter()
            try:
                c.get("/healthz")
                worst = max(worst, time.perf_counter() - start)
                probes += 1
            except httpx.HTTPError:
                failures += 1
            stop.wait(every)
    results.send((worst, probes, failures))


_LOG_TAIL = 2_000_000  # bytes of each log kept: the end, where a run's trouble is


def keep_logs(processes: Iterable[ProcessRecord], log_dir: Path) -> None:
    """Copy each process's log (its last 2 MB) into `log_dir`."""
    log_dir.mkdir(parents=True, exist_ok=True)
    for p in processes:
        if p.log.exists():
            with p.log.open("rb") as f:
                f.seek(max(0, p.log.stat().st_size - _LOG_TAIL))
                (log_dir / p.log.name).write_bytes(f.read())
