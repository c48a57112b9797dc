"""Server-side latency of filter and prioritize, by cluster size, pod and background load.

Starts the extender standalone (`serve --mode standalone`: no API server in the path, nodes learnt
from the requests) on loopback, gives every node an ephemeral resource and runs ESLs over
them, then drives each verb with locust (loadtests/extender_locustfile.py) with bodies shaped
like the ones the real kube-scheduler sends (tests/fixtures/kube-scheduler-v1.37/): a full
Pod and NodeNames, as the deployed configuration has it (nodeCacheCapable: true). Pods are
`plain` (cpu and memory: the fast path) or `ephemeral` (one unit of the resource: filtered
and scored on the ledger). Each case runs `quiet` and `loaded`: with a second process
scraping /metrics in a tight loop, stepping an ESL and changing a resource, as a cluster's
monitoring and policies do. The server-side time comes from each reply's Server-Timing
header. Called by escher_harness.bench.extender_bench; BackgroundLoad also by
tests/process/test_process_isolation.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Final

import httpx

from escher_harness.bench.stats import summary
from escher_harness.localcluster.paths import REPO_ROOT
from escher_harness.localcluster.ports import allocate_ports

LOCUSTFILE = REPO_ROOT / "loadtests" / "extender_locustfile.py"
RESOURCE = "escher.io/bench"
WARMUP = 50  # at most this many first calls of each run are dropped (cold paths)


PODS: Final = ("plain", "ephemeral")
LOADS: Final = ("quiet", "loaded")
TOKEN: Final = "bench"


def pod(kind: str = "ephemeral") -> dict[str, Any]:
    """A pod as kube-scheduler sends it (defaults filled in by the API server)."""
    ephemeral = {RESOURCE: "1"} if kind == "ephemeral" else {}
    return {
        "metadata": {
            "name": "bench-0",
            "namespace": "default",
            "uid": "5c0f5d2e-7a51-4d0e-9e61-0e3a54c7a001",
            "resourceVersion": "1001",
            "creationTimestamp": "2026-11-21T00:00:00Z",
            "labels": {"app": "bench"},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "imagePullPolicy": "IfNotPresent",
                    "resources": {
                        "limits": ephemeral,
                        "requests": {**ephemeral, "cpu": "100m", "memory": "64Mi"},
                    },
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                }
            ],
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "securityContext": {},
            "terminationGracePeriodSeconds": 30,
            "tolerations": [
                {
                    "effect": "NoExecute",
                    "key": f"node.kubernetes.io/{k}",
                    "operator": "Exists",
                    "tolerationSeconds": 300,
                }
                for k in ("not-ready", "unreachable")
            ],
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def node(i: int) -> dict[str, Any]:
    """A Node object of the size the local control plane's fake nodes have (~1 KB)."""
    name = f"node-{i}"
    quantities = {"cpu": "32", "memory": "128Gi", "pods": "110", RESOURCE: "1000000"}
    return {
        "metadata": {
            "name": name,
            "uid": f"00000000-0000-4000-8000-{i:012d}",
            "resourceVersion": str(100 + i),
            "creationTimestamp": "2026-11-21T00:00:00Z",
            "labels": {"kubernetes.io/hostname": name, "pool": "general"},
            "managedFields": [
                {
                    "apiVersion": "v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}},
                    "manager": "escher-extender",
                    "operation": "Update",
                    "time": "2026-11-21T00:00:00Z",
                }
            ],
        },
        "spec": {},
        "status": {
            "allocatable": quantities,
            "capacity": quantities,
            "conditions": [
                {
                    "lastHeartbeatTime": "2026-11-21T00:00:00Z",
                    "lastTransitionTime": "2026-11-21T00:00:00Z",
                    "message": "fake node, no kubelet",
                    "reason": "KubeletReady",
                    "status": "True",
                    "type": "Ready",
                }
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"},
        },
    }


def round_trips(client: httpx.Client, body: bytes, calls: int) -> list[float]:
    """`calls` filter calls of `body`, one after another on `client`'s kept-alive connection,
    as kube-scheduler makes them: each call's client round trip in ms (hack/tls-cost.py and
    hack/leader-cost.py compare setups with it)."""
    out = []
    for _ in range(calls):
        t = time.perf_counter()
        r = client.post("/filter", content=body, headers={"Content-Type": "application/json"})
        out.append((time.perf_counter() - t) * 1000)
        if r.status_code != 200:
            raise RuntimeError(f"filter answered {r.status_code}: {r.text[:200]}")
    return out


def args(nodes: int, kind: str = "ephemeral") -> dict[str, Any]:
    """ExtenderArgs as kube-scheduler sends them with nodeCacheCapable: the pod and names."""
    return {"Pod": pod(kind), "Nodes": None, "NodeNames": [f"node-{i}" for i in range(nodes)]}


STANDALONE: Final = ("--mode", "standalone", "--token", TOKEN, "--log-level", "WARNING")


class Server:
    """The extender as a child process on a free loopback port, ready once constructed:
    standalone with the benchmarks' token, or with the given `serve` flags (tests run one
    beside a cluster's own)."""

    def __init__(self, log: Path, flags: Sequence[str] = STANDALONE) -> None:
        self.port = allocate_ports({"extender": None})["extender"]
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-P", "-m", "extender", "serve", "--port", str(self.port), *flags]
        self._log = log.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the extender did not start; see {log}")
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def _run_locust(url: str, verb: str, body: Path, seconds: float, work: Path) -> list[float]:
    if not LOCUSTFILE.exists():
        raise RuntimeError(f"{LOCUSTFILE} not found: run the benchmark from a source checkout")
    timings = work / f"timings-{verb}.json"
    env = dict(os.environ)
    env.update(
        ESCHER_BENCH_VERB=verb, ESCHER_BENCH_PAYLOAD=str(body), ESCHER_BENCH_TIMINGS=str(timings)
    )
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", "1"]
    cmd += ["-r", "1", "-t", f"{max(1, round(seconds))}s", "--host", url, "--only-summary"]
    cmd += ["--loglevel", "WARNING", "--stop-timeout", "5"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not timings.exists():
        raise RuntimeError(f"locust failed ({done.returncode}): {done.stderr[-2000:]}")
    sample: list[float] = json.loads(timings.read_text())
    if len(sample) < 20:
        raise RuntimeError(f"locust made only {len(sample)} {verb} calls in {seconds}s")
    return sample[min(WARMUP, len(sample) // 10) :]


class BackgroundLoad:
    """A second process that scrapes the extender's /metrics in a tight loop and, every fifth
    scrape, steps an ESL and changes a resource's capacity; until the context ends."""

    SCRIPT: Final = (
        "import httpx, itertools, sys\n"
        "auth = {'Authorization': 'Bearer ' + sys.argv[2]}\n"
        "c = httpx.Client(base_url=sys.argv[1], headers=auth)\n"
        "for i in itertools.count():\n"
        "    c.get('/metrics')\n"
        "    if i % 5 == 0:\n"
        "        c.post('/v1/esl/loadbalance-bench-lb/step')\n"
        "        c.put('/v1/resources/bench-churn', json={'capacity': 1 + i % 7})\n"
    )

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> BackgroundLoad:
        headers = {"Authorization": f"Bearer {self.token}"}
        r = httpx.post(
            f"{self.url}/v1/esl/loadbalance",
            json={"name": "bench-lb", "mode": "dynamic"},
            headers=headers,
            timeout=30,
        )
        if r.status_code not in (201, 202, 409):
            raise RuntimeError(f"cannot create the load's ESL: {r.status_code} {r.text[:200]}")
        self._proc = subprocess.Popen(
            [sys.executable, "-c", self.SCRIPT, self.url, self.token],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.5)  # under way before the first measured call
        return self

    def __exit__(self, *_: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(10)


def run(
    sizes: list[int], seconds: float, out: Path, progress: Callable[[str], None]
) -> tuple[list[dict[str, Any]], dict[str, list[float]]]:
    """Rows of {verb, nodes, pod, load, server_ms{...}, calls, calls_per_s, body_bytes} and
    the raw server-side samples (ms) by "verb/nodes/pod/load", for plots."""
    rows: list[dict[str, Any]] = []
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="escher-bench-") as tmp:
        work = Path(tmp)
        for n in sizes:
            server = Server(out / f"extender-{n}.log")
            try:
                # Learn the nodes (standalone mode), then give each the resource.
                httpx.post(f"{server.url}/filter", json=args(n), timeout=30)
                r = httpx.put(
                    f"{server.url}/v1/resources/bench",
                    json={"capacity": 10**6},
                    headers={"Authorization": f"Bearer {TOKEN}"},
                    timeout=30,
                )
                r.raise_for_status()
                for kind in PODS:
                    body = work / "args.json"
                    body.write_text(json.dumps(args(n, kind)))
                    for load in LOADS:
                        background = BackgroundLoad(server.url, TOKEN)
                        with background if load == "loaded" else nullcontext():
                            for verb in ("filter", "prioritize"):
                                progress(f"latency: {verb} at {n} nodes, {kind} pod, {load}")
                                sample = _run_locust(server.url, verb, body, seconds, work)
                                samples[f"{verb}/{n}/{kind}/{load}"] = sample
                                rows.append(_row(verb, n, kind, load, body, sample, seconds))
            finally:
                server.stop()
    return rows, samples


def _row(
    verb: str, nodes: int, kind: str, load: str, body: Path, sample: list[float], seconds: float
) -> dict[str, Any]:
    return {
        "verb": verb,
        "nodes": nodes,
        "pod": kind,
        "load": load,
        "body_bytes": body.stat().st_size,
        "calls": len(sample),
        "calls_per_s": round(len(sample) / seconds, 1),
        "server_ms": summary(sample),
    }
