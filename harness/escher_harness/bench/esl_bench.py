"""`escher-extender bench esl --out DIR`: where the extender beats timeouts and resubmission.

Two policies the extender can express as prioritize scores (extender.filters.preference)
and the pure approach only with time (ESCHER's constructions):

- soft constraints, the first choice full: the extender places each pod at once on the
  best alternative that fits; the pure approach waits for the timeout, falls back and
  resubmits. Also with the first choice free, where both should be immediate.
- bin-packing: the extender packs at placement; the pure approach grows its set of nodes
  one node per step, while pods wait. Plain kube-scheduler (no ESL) is shown for the nodes
  it uses.

Per approach, on a fresh local control plane (extender: extender mode, ExtenderBackend;
pure: no extender service, NodeBackend), each scenario is run `trials` times; the time to
placement of every pod is from its (first) creation to its (last) submission being bound,
seen by a watch. Writes DIR/results.json and DIR/report.md and prints the table. Called by
extender.cli.
"""

from __future__ import annotations

import itertools
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from escher_harness import localcluster
from escher_harness.bench.stats import summary
from escher_harness.kubeclient import api_client
from escher_harness.localcluster.config import Mode
from escher_harness.workload import PodChange, Workload, pod_manifest
from extender.esl.backends import ExtenderBackend
from extender.esl.base import Backend, PodRequest
from extender.esl.binpack import BinPack, BinPackParams
from extender.esl.client import PolicyClient
from extender.esl.kube.nodestatus import NodeBackend
from extender.esl.soft import Soft, SoftParams

APPROACHES = ("extender", "pure")
_POLL = 0.2  # how often the application looks at its pods and steps the ESL


@dataclass(frozen=True)
class Config:
    nodes: int = 4
    node_cpu: str = "4"
    trials: int = 5
    soft_pods: int = 2  # per trial, 1 cpu each; the first choice is one node
    soft_timeout: float = 5.0  # the pure approach's fallback timeout
    pack_pods: int = 6  # per trial, 2 cpu each: 3 nodes of 4 cpu at best
    pack_cpu: str = "2"
    deadline: float = 90.0  # a trial not placed by then is an error


def quick() -> Config:
    return Config(trials=2, soft_timeout=3.0)


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Bound:
    """When each pod was first seen bound, and where (a watch, no polling interval)."""

    def __init__(self, work: Workload) -> None:
        self.at: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=work.watch, args=(self._stop, self._on), daemon=True)
        self._thread.start()

    def _on(self, c: PodChange) -> None:
        if not c.deleted and c.node:
            with self._lock:
                self.at.setdefault(c.name, (time.monotonic(), c.node))

    def get(self, name: str) -> tuple[float, str] | None:
        with self._lock:
            return self.at.get(name)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


class Run:
    """One approach's cluster, backend and pod bookkeeping."""

    def __init__(self, approach: str, info: localcluster.ClusterInfo) -> None:
        self.approach = approach
        self.info = info
        api = api_client(info.kubeconfig)
        self.work = Workload(api)
        self.backend: Backend
        if approach == "extender":
            assert info.extender_url and info.token
            self.backend = ExtenderBackend(PolicyClient(info.extender_url, info.token))
        else:
            self.backend = NodeBackend(api, info.resource_domain)
        self.bound = Bound(self.work)
        self._names = itertools.count()

    def create(self, req: PodRequest, cpu: str, n: int) -> list[str]:
        names = [f"b{next(self._names)}" for _ in range(n)]
        limits = {**req.limits, "cpu": cpu}
        for name in names:
            self.work.create(
                pod_manifest(name, limits=limits, labels=req.labels, annotations=req.annotations)
            )
        return names

    def filler(self, node: str, cpu: str) -> str:
        """A pod bound straight to `node` taking `cpu` (no scheduler: already placed)."""
        name = f"filler{next(self._names)}"
        m = pod_manifest(name, requests={"cpu": cpu})
        m["spec"]["nodeName"] = node
        self.work.create(m)
        return name

    def drive(
        self,
        req: Callable[[], PodRequest],
        step: Callable[[], bool],
        cpu: str,
        n: int,
        deadline: float,
    ) -> tuple[list[float], list[str], int]:
        """Create n pods and drive them as an application does: step the ESL, resubmit the
        pending pods when it changes what they must request. Per pod, seconds to placement
        and its node; and how many pods were resubmitted."""
        start = time.monotonic()
        current = self.create(req(), cpu, n)  # slot i: its latest pod
        resubmitted = 0
        while True:
            if all(self.bound.get(name) for name in current):
                break
            if time.monotonic() - start > deadline:
                raise RuntimeError(f"{self.approach}: pods not placed in {deadline:g}s")
            before = req()
            if step() and req() != before:
                for i, name in enumerate(current):
                    if not self.bound.get(name):
                        self.work.delete([name])
                        current[i] = self.create(req(), cpu, 1)[0]
                        resubmitted += 1
            time.sleep(_POLL)
        placed = [self.bound.get(name) for name in current]
        self.work.delete(current)
        return (
            [round(p[0] - start, 3) for p in placed if p],
            [p[1] for p in placed if p],
            resubmitted,
        )


def soft_trial(run: Run, cfg: Config, trial: int, first_full: bool) -> dict[str, Any]:
    filler = run.filler("node-1", cfg.node_cpu) if first_full else None  # all its cpu
    params = SoftParams.model_validate(
        {
            "name": f"{'full' if first_full else 'free'}{trial}",
            "alternatives": [{"node": "node-1"}, {}],
            "timeout_seconds": cfg.soft_timeout,
            "pods": cfg.soft_pods,
        }
    )
    esl = Soft(run.backend, params)
    esl.apply()
    try:
        seconds, nodes, resub = run.drive(
            esl.requests_for, lambda: bool(esl.step()), "1", cfg.soft_pods, cfg.deadline
        )
    finally:
        esl.teardown()
        if filler:
            run.work.delete([filler])
    return {"seconds": seconds, "on_first_choice": nodes.count("node-1"), "resubmitted": resub}


def pack_trial(run: Run, cfg: Config, trial: int, plain: bool) -> dict[str, Any]:
    if plain:  # no ESL: plain kube-scheduler spreads by least allocated
        seconds, nodes, _ = run.drive(
            lambda: PodRequest(limits={}), lambda: False, cfg.pack_cpu, cfg.pack_pods, 60
        )
        return {"seconds": seconds, "nodes_used": len(set(nodes))}
    esl = BinPack(run.backend, BinPackParams(name=f"b{trial}", cpu=cfg.pack_cpu))
    esl.apply()
    try:
        seconds, nodes, _ = run.drive(
            esl.requests_for, lambda: bool(esl.step()), cfg.pack_cpu, cfg.pack_pods, cfg.deadline
        )
    finally:
        esl.teardown()
    return {"seconds": seconds, "nodes_used": len(set(nodes))}


def _settle(run: Run) -> None:
    """Wait until the previous trial's pods are gone, so each trial starts on empty nodes."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = run.backend.cluster_state()
        if all(res["pods"].allocated == 0 for res in state.nodes.values()):
            return
        time.sleep(0.2)


SCENARIOS: dict[str, Callable[[Run, Config, int], dict[str, Any]]] = {
    "soft, first choice free": lambda r, c, t: soft_trial(r, c, t, first_full=False),
    "soft, first choice full": lambda r, c, t: soft_trial(r, c, t, first_full=True),
    "bin-packing": lambda r, c, t: pack_trial(r, c, t, plain=False),
}


def run_approach(approach: str, cfg: Config) -> dict[str, Any]:
    mode: Mode = "extender" if approach == "extender" else "none"
    with tempfile.TemporaryDirectory(prefix=f"escher-esl-{approach}-") as tmp:
        spec = localcluster.ClusterSpec(
            dir=Path(tmp) / "c",
            nodes=cfg.nodes,
            mode=mode,
            # Every pod every exchange in mode extender, as the results on record were measured.
            scope="every-pod" if mode == "extender" else "split",
            node_cpu=cfg.node_cpu,
        )
        info = localcluster.up(spec)
        run = Run(approach, info)
        try:
            scenarios = dict(SCENARIOS)
            if approach == "extender":  # plain kube-scheduler needs no approach: once is enough
                scenarios["bin-packing, no ESL"] = lambda r, c, t: pack_trial(r, c, t, plain=True)
            out: dict[str, Any] = {}
            for name, trial in scenarios.items():
                trials = []
                for t in range(cfg.trials):
                    _settle(run)
                    trials.append(trial(run, cfg, t))
                _say(f"{approach}: {name}: {cfg.trials} trials done")
                seconds = [s for tr in trials for s in tr["seconds"]]
                out[name] = {"seconds": summary(seconds), "trials": trials}
                for key in ("on_first_choice", "resubmitted", "nodes_used"):
                    if key in trials[0]:
                        out[name][key] = sum(tr[key] for tr in trials) / len(trials)
            return out
        finally:
            run.bound.close()
            localcluster.down(info.dir)


def table(results: dict[str, dict[str, Any]]) -> str:
    rows = [
        "| scenario | approach | p50 s | p90 s | max s | on 1st choice / trial "
        "| resubmitted / trial | nodes used |",
        "|---|---|---|---|---|---|---|---|",
    ]
    names = list(dict.fromkeys(n for per in results.values() for n in per))
    for name in names:
        for approach, per in results.items():
            r = per.get(name)
            if r is None:
                continue
            s = r["seconds"]
            extra = [r.get(k, "") for k in ("on_first_choice", "resubmitted", "nodes_used")]
            cells = [name, approach, s["p50"], s["p90"], s["max"], *extra]
            rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(rows)


def run(out: Path, cfg: Config, which: Sequence[str] = APPROACHES) -> int:
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    results: dict[str, dict[str, Any]] = {}
    for approach in which:
        _say(f"{approach}: starting a fresh control plane")
        results[approach] = run_approach(approach, cfg)
    doc = {
        "config": asdict(cfg),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "duration_s": round(time.time() - started, 1),
        "results": results,
    }
    (out / "results.json").write_text(json.dumps(doc, indent=2) + "\n")
    text = table(results)
    (out / "report.md").write_text(
        "# ESL benchmark: prioritize scores vs timeouts and resubmission\n\n"
        f"{cfg.nodes} nodes of {cfg.node_cpu} cpu, {cfg.trials} trials per scenario, "
        f"pure soft timeout {cfg.soft_timeout:g}s. Seconds from a pod's creation to placement.\n\n"
        + text
        + "\n"
    )
    print(text)
    return 0
