"""One scheduler_perf run: kube-scheduler's benchmark binary, and the ESCHER extender beside it.

The binary (hack/build-scheduler-perf.sh: `go test -c` of hack/scheduler-perf) starts its own
etcd (the one on PATH, on a unix socket in TMPDIR), an in-process kube-apiserver on a free
loopback port and an in-process kube-scheduler, runs one workload and writes its data items.
It hands its cluster over at two points (hack/scheduler-perf/scheduler_perf_test.go): once the
control plane is up it writes handover/cluster.kubeconfig (the apiserver's loopback URL and
token, TLS verification skipped: an outside process can reach it) and waits; this module then
starts `escher-extender serve` against it (extender and pure ways), waits for /readyz, scrapes
/metrics and acknowledges. After each createNodes op it waits again, until the extender's ledger
holds every node, so the extender's watch is not still catching up when the measured pods
arrive. The default way gets the same hand-over, acknowledged at once, so every way runs the
same steps.

When the workload is over, before the control plane stops, it hands over a last time: /metrics
is scraped again (the extender's own server-side latency and decisions during the run) and
the extender stopped. At the end every process is stopped and TMPDIR (etcd's data) removed.
Called by escher_harness.bench.scheduler_perf.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import yaml

from escher_harness.bench import schedperf_items
from escher_harness.bench.schedperf_config import (
    SCHEDULER_CLIENT_QPS,
    Way,
    Workload,
    load_test_cases,
    render_scheduler_config,
    render_test_case,
)
from escher_harness.bench.throughput import extender_costs
from escher_harness.localcluster import health, processes
from escher_harness.localcluster.binaries import find_binaries
from escher_harness.localcluster.config import (
    DEFAULT_RESOURCE_DOMAIN,
    dump_yaml,
    extender_command,
)
from escher_harness.localcluster.errors import ClusterError
from escher_harness.localcluster.paths import REPO_ROOT, cache_dir
from escher_harness.localcluster.ports import allocate_ports
from extender.esl.client import PolicyClient

BUILD_SCRIPT: Final = REPO_ROOT / "hack" / "build-scheduler-perf.sh"
TOPIC: Final = "escher"
_EXTENDER_START_SECONDS: Final = 60.0
_NODES_SEEN_SECONDS: Final = 120.0
# One run of the largest workload (1,000 nodes) takes a few minutes; pods that never fit would
# otherwise keep scheduler_perf waiting without end.
_RUN_SECONDS: Final = 900.0

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Build:
    """Where hack/build-scheduler-perf.sh put the binary and what it reads at run time."""

    binary: Path
    data: Path  # upstream's templates and performance-config.yaml, the apiserver's fixture
    kubernetes: str  # the pinned k8s.io/kubernetes version

    @property
    def upstream_config(self) -> Path:
        return self.data / "misc" / "performance-config.yaml"


def build(progress: Progress) -> Build:
    """Run hack/build-scheduler-perf.sh (a no-op when the binary is up to date)."""
    env = {**os.environ, "ESCHER_CACHE_DIR": str(cache_dir())}
    done = subprocess.run([str(BUILD_SCRIPT)], env=env, capture_output=True, text=True, check=False)
    for line in done.stdout.splitlines():
        progress(line)
    if done.returncode != 0:
        raise RuntimeError(
            f"{BUILD_SCRIPT.name} failed (run `make scheduler-perf` to see why): "
            f"{done.stderr.strip()[-500:]}"
        )
    data = cache_dir() / "scheduler-perf"
    return Build(
        binary=cache_dir() / "bin" / "scheduler-perf.test",
        data=data,
        kubernetes=(data / "kubernetes-version").read_text().strip(),
    )


@dataclass(frozen=True)
class Run:
    """One run of one workload one way, and what it measured."""

    workload: Workload
    way: Way
    repetition: int
    argv: tuple[str, ...]
    extender_argv: tuple[str, ...] | None
    seconds: float  # the whole run: control plane start-up and teardown included
    results: schedperf_items.Results
    client: Mapping[str, Any]  # the in-process scheduler's client: server, qps, burst
    load: tuple[float, ...]  # the 1-minute load average, sampled once a second
    # What the run cost the extender (server-side latency per verb, bind API calls).
    extender: Mapping[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        return {
            "test_case": self.workload.test_case,
            "workload": self.workload.name,
            "way": self.way,
            "repetition": self.repetition,
            "argv": list(self.argv),
            "extender_argv": list(self.extender_argv) if self.extender_argv else None,
            "seconds": round(self.seconds, 1),
            "results": self.results.to_json(),
            "client": dict(self.client),
            "load_average_1m": {
                "mean": round(sum(self.load) / len(self.load), 2) if self.load else None,
                "max": max(self.load) if self.load else None,
                "samples": list(self.load),
            },
            "extender": dict(self.extender) if self.extender else None,
        }


def run(
    wl: Workload, way: Way, repetition: int, run_dir: Path, built: Build, progress: Progress
) -> Run:
    """Run `wl` the `way` way once, in `run_dir` (created; it keeps the inputs, the logs and
    the data items)."""
    run_dir.mkdir(parents=True)
    handover, items = run_dir / "handover", run_dir / "items"
    handover.mkdir()
    # etcd listens on a unix socket under TMPDIR, and a socket path has at most 107 bytes:
    # a short directory of its own, not one under run_dir.
    tmp = Path(tempfile.mkdtemp(prefix="schedperf-"))
    port = allocate_ports({"extender": None})["extender"]
    url = f"http://127.0.0.1:{port}"
    test_case = _write_inputs(wl, way, run_dir, built, url)
    argv = (
        str(built.binary),
        "-test.run=^$",
        "-test.bench=BenchmarkPerfScheduling",
        "-test.benchtime=1x",
        "-perf-scheduling-label-filter=",  # the file holds exactly the workload to run
        f"-escher-config={test_case}",
        f"-escher-topic={TOPIC}",
        f"-escher-handover={handover}",
        f"-data-items-dir={items}",
    )
    token = secrets.token_hex(16)
    hand = _Handover(
        handover, url, token, _extender_argv(way, port, handover, token), run_dir, progress
    )
    started = time.monotonic()
    bench = processes.spawn(
        "scheduler-perf",
        argv,
        log=run_dir / "scheduler-perf.log",
        port=0,
        health_url="",
        env=_bench_env(built, tmp),
    )
    try:
        load = _follow(bench, hand, started)
        code = processes.wait_exit(bench)
    finally:
        hand.stop_extender()
        processes.stop(bench)  # and etcd, its child, if it is still there
        shutil.rmtree(tmp, ignore_errors=True)
    seconds = time.monotonic() - started
    if code != 0:
        raise RuntimeError(
            f"scheduler-perf exited with {code}; last lines of {bench.log}:\n"
            f"{processes.log_tail(bench.log, 25)}"
        )
    results = schedperf_items.parse(schedperf_items.find(items).read_bytes())
    return Run(
        workload=wl,
        way=way,
        repetition=repetition,
        argv=argv,
        extender_argv=hand.extender_argv,
        seconds=seconds,
        results=results,
        client=hand.client,
        load=tuple(load),
        extender=extender_costs(hand.before, hand.after, wl.measured_pods + wl.init_pods),
    )


def _write_inputs(wl: Workload, way: Way, run_dir: Path, built: Build, url: str) -> Path:
    """Write the run's scheduler configuration and test case; the test case's path."""
    scheduler_config = run_dir / "scheduler-config.yaml"
    scheduler_config.write_text(
        dump_yaml(render_scheduler_config(way, extender_url=url if way == "extender" else None))
    )
    test_case = run_dir / "test-case.yaml"
    test_case.write_text(
        yaml.safe_dump(
            render_test_case(
                load_test_cases(),
                wl,
                templates=built.data,
                scheduler_config_path=scheduler_config,
            ),
            sort_keys=False,
        )
    )
    return test_case


def _bench_env(built: Build, tmp: Path) -> dict[str, str]:
    etcd = find_binaries().etcd
    return {
        **os.environ,
        "PATH": f"{etcd.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "TMPDIR": str(tmp),
        # The in-process apiserver's certificate fixture (see hack/build-scheduler-perf.sh).
        "TEST_SRCDIR": str(built.data),
        "TEST_WORKSPACE": "src",
        "KUBE_CACHE_MUTATION_DETECTOR": "false",  # as upstream's README runs benchmarks
    }


def _extender_argv(way: Way, port: int, handover: Path, token: str) -> tuple[str, ...] | None:
    if way == "default":
        return None
    return tuple(
        extender_command(
            port=port,
            kubeconfig=handover / "cluster.kubeconfig",
            mode="pure" if way == "pure" else "extender",
            token=token,
            # Not the workload's domain: an extender owning foo.com writes the nodes'
            # foo.com/* capacity back to what its ledger declares (nothing), and no pod fits.
            domain=DEFAULT_RESOURCE_DOMAIN,
            kube_qps=SCHEDULER_CLIENT_QPS,
            kube_burst=SCHEDULER_CLIENT_QPS,
        )
    )


def _follow(bench: processes.ProcessRecord, hand: _Handover, started: float) -> list[float]:
    """Answer the hand-overs until the binary exits; the load average once a second."""
    load: list[float] = []
    next_sample = time.monotonic()
    while processes.is_running(bench):
        if time.monotonic() - started > _RUN_SECONDS:
            raise RuntimeError(
                f"scheduler-perf still running after {_RUN_SECONDS:g}s; see {bench.log}"
            )
        if time.monotonic() >= next_sample:
            load.append(os.getloadavg()[0])
            next_sample += 1.0
        hand.answer_posted()
        time.sleep(0.05)
    return load


@dataclass
class _Handover:
    """This side of scheduler_perf's hand-overs: the extender it starts and stops, the
    client the binary posted, and the extender's /metrics before and after the workload."""

    dir: Path
    url: str
    token: str
    extender_argv: tuple[str, ...] | None
    run_dir: Path
    progress: Progress
    extender: processes.ProcessRecord | None = None
    before: str | None = None
    after: str | None = None
    client: dict[str, Any] = field(default_factory=dict)

    def answer_posted(self) -> None:
        """Answer each hand-over posted and not yet acknowledged, then acknowledge it."""
        for posted in sorted(self.dir.glob("*.json")):
            ack = posted.with_suffix(".ack")
            if ack.exists():
                continue
            self._answer(posted.stem, json.loads(posted.read_text()))
            ack.touch()

    def _answer(self, point: str, content: dict[str, Any]) -> None:
        if point == "cluster":
            self.client = content
            if self.extender_argv is not None:
                self.progress(f"  control plane up at {content['server']}; starting the extender")
                log = self.run_dir / "extender.log"
                self.extender = _start_extender(self.extender_argv, self.url, log)
                self.before = _scrape(self.url)
        elif point == "done":
            if self.extender is not None:
                self.after = _scrape(self.url)
                # Stopped while the apiserver runs: its teardown would otherwise wait for the
                # extender's watches to time out.
                self.stop_extender()
        elif self.extender is not None:
            _wait_nodes_seen(self.url, self.token, content["nodes"], self.progress)

    def stop_extender(self) -> None:
        if self.extender is not None:
            processes.stop(self.extender)
            self.extender = None


def _start_extender(argv: tuple[str, ...], url: str, log: Path) -> processes.ProcessRecord:
    record = processes.spawn("escher-extender", argv, log=log, port=0, health_url=f"{url}/readyz")
    try:
        health.wait_ready(
            record,
            deadline=time.monotonic() + _EXTENDER_START_SECONDS,
            timeout=_EXTENDER_START_SECONDS,
        )
    except ClusterError as e:
        processes.stop(record)
        raise RuntimeError(str(e)) from None
    return record


def _scrape(url: str) -> str:
    response = httpx.get(f"{url}/metrics", timeout=10.0)
    response.raise_for_status()
    return response.text


def _wait_nodes_seen(url: str, token: str, nodes: list[str], progress: Progress) -> None:
    """Until the extender's ledger holds every node in `nodes` (its watch caught up)."""
    deadline = time.monotonic() + _NODES_SEEN_SECONDS
    with PolicyClient(url, token) as policy:
        while True:
            missing = set(nodes) - set(policy.cluster_state().nodes)
            if not missing:
                progress(f"  {len(nodes)} nodes created; the extender has seen them all")
                return
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"the extender had not seen {len(missing)} of {len(nodes)} nodes "
                    f"after {_NODES_SEEN_SECONDS:g}s"
                )
            time.sleep(0.1)
