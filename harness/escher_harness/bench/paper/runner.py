"""The frame of `bench paper`: for each repetition, first the experiments that compare
approaches on clusters of their own (E6: each design on a fresh cluster), then each mode
(the first rotating, so drift in the machine's load hits every mode alike) on a fresh
cluster of its own with the selected experiments of Fig. 8 one after another; then the
report.

Each mode's cluster is the bench approaches registry's row of that name on one Footing
(escher_harness.bench.approaches: pure, extender as deploy/ runs it, dra; the nodes and API
budgets alike), so each runs as it ships. Before the experiments a few resources and pods
go through every path once, uncounted. Every run is written to DIR/results.json as soon as
it ends, so an interrupted campaign keeps what it measured. Called by escher_harness.cli.
"""

from __future__ import annotations

import dataclasses
import json
import random
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx
from kubernetes.client.exceptions import ApiException

from escher_harness import localcluster
from escher_harness.bench import approaches, environment
from escher_harness.bench.gang_bench import order
from escher_harness.bench.paper import (
    e1_locality,
    e3_fairshare,
    e6_designs,
    e6_gangs,
    e7_creation,
    e8_makespan,
    e9_requested,
    report,
)
from escher_harness.bench.paper.context import Context, say
from escher_harness.kubeclient import api_client
from extender.esl.client import PolicyAPIError, PolicyClient

MODES: Final = ("pure", "extender", "dra")
# What ends one experiment's run, recorded, while the campaign goes on: its own checks, and
# the API server's or the service's errors on an overloaded machine.
_FAILED: Final = (RuntimeError, AssertionError, ApiException, PolicyAPIError, httpx.HTTPError)
EXPERIMENTS: Final = ("E6", "E1", "E2", "E3", "E7", "E8", "E9")


@dataclass(frozen=True)
class Config:
    experiments: tuple[str, ...] = EXPERIMENTS
    modes: tuple[str, ...] = MODES
    repeat: int = 3
    seed: int = 62
    nodes: int = 50  # the paper's, for E7-E9
    node_cpu: str = "32"
    node_memory: str = "128Gi"
    e7_sizes: tuple[int, ...] = e7_creation.SIZES
    e7_clients: tuple[int, ...] = e7_creation.CLIENTS
    e8_sizes: tuple[int, ...] = e8_makespan.SIZES
    e8_pods: int = e8_makespan.PODS
    e9_sizes: tuple[int, ...] = e9_requested.SIZES
    e9_pods: int = e9_requested.PODS
    e6_designs: tuple[str, ...] = tuple(e6_designs.DESIGNS)
    e6_duration: float = e6_gangs.DURATION
    e1_nodes: int = e1_locality.NODES
    e1_inputs: tuple[int, ...] = e1_locality.INPUTS_GB
    e2_sizes: tuple[int, ...] = e1_locality.E2_SIZES
    e3: e3_fairshare.Setup = e3_fairshare.FULL
    quick: bool = False


def quick() -> Config:
    """Every experiment small, once per mode or approach. E6, E1/E2 and E3 together took
    9 min 36 s at load 6-13; E7-E9's part missed its 10 minutes on the shared machine under
    load 30-44 (pure alone took 14: docs/paper.md)."""
    return Config(
        repeat=1,
        e7_sizes=e7_creation.QUICK_SIZES,
        e8_sizes=e8_makespan.QUICK_SIZES,
        e8_pods=e8_makespan.QUICK_PODS,
        e9_sizes=e9_requested.QUICK_SIZES,
        e9_pods=e9_requested.QUICK_PODS,
        e6_designs=e6_designs.QUICK,
        e6_duration=e6_gangs.QUICK_DURATION,
        e1_nodes=e1_locality.QUICK_NODES,
        e1_inputs=e1_locality.QUICK_INPUTS_GB,
        e2_sizes=e1_locality.QUICK_E2_SIZES,
        e3=e3_fairshare.QUICK,
        quick=True,
    )


# An experiment fills its record size by size, so a failure keeps the sizes measured before.
Experiment = Callable[[Context, Config, dict[str, Any]], None]
MODE_RUNS: Final[Mapping[str, Experiment]] = {
    "E7": lambda ctx, c, out: e7_creation.run(ctx, c.e7_sizes, c.e7_clients, out),
    "E8": lambda ctx, c, out: e8_makespan.run(ctx, c.e8_sizes, c.e8_pods, out),
    "E9": lambda ctx, c, out: e9_requested.run(ctx, c.e9_sizes, c.e9_pods, out),
}


@dataclass(frozen=True)
class Own:
    """Experiments that run each approach on a cluster of their own: which they are (E1 and
    E2 share their clusters), the approaches (by the config), and one approach's run of the
    selected ones, {experiment: its result}."""

    experiments: tuple[str, ...]
    approaches: Callable[[Config], tuple[str, ...]]
    run: Callable[[Config, str, int, tuple[str, ...]], dict[str, Any]]


OWN_RUNS: Final = (
    Own(
        ("E6",),
        lambda c: c.e6_designs,
        lambda c, design, rep, _: {"E6": e6_gangs.run(design, c.e6_duration, c.seed, rep)},
    ),
    Own(
        ("E1", "E2"),
        lambda c: tuple(e1_locality.ROWS),
        lambda c, mode, rep, which: _e1(c, mode, rep, which),
    ),
    Own(
        ("E3",),
        lambda c: e3_fairshare.MODES,
        lambda c, mode, rep, _: {"E3": e3_fairshare.run(mode, c.e3, rep)},
    ),
)


def _e1(cfg: Config, mode: str, rep: int, which: tuple[str, ...]) -> dict[str, Any]:
    """E1's and E2's jobs (those selected) on one cluster of the mode, as large as the
    largest job's nodes."""
    points = {
        "E1": e1_locality.e1_points(cfg.e1_nodes, cfg.e1_inputs),
        "E2": e1_locality.e2_points(cfg.e2_sizes),
    }
    jobs = {e: points[e] for e in which}
    nodes = max(n for p in jobs.values() for n, _ in p.values())
    return e1_locality.run(mode, nodes, jobs, _seed(cfg, rep), rep)


def _seed(cfg: Config, rep: int) -> int:
    return cfg.seed * 1000 + rep


def check(cfg: Config) -> None:
    """ValueError for an experiment, mode or design this command does not know."""
    for e in cfg.experiments:
        if e not in EXPERIMENTS:
            raise ValueError(f"unknown experiment {e!r}; built: {', '.join(EXPERIMENTS)}")
    for d in cfg.e6_designs:
        if d not in e6_designs.DESIGNS:
            raise ValueError(
                f"unknown E6 design {d!r}; choose from {', '.join(e6_designs.DESIGNS)}"
            )
    for m in cfg.modes:
        if m not in MODES:
            raise ValueError(f"unknown mode {m!r}; choose from {', '.join(MODES)}")


def run(out: Path, cfg: Config, command: str) -> int:
    check(cfg)
    out.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "command": command,
        "config": dataclasses.asdict(cfg),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "versions": environment.versions(),
        "machine": environment.machine(),
        "runs": [],
    }
    modes = [e for e in cfg.experiments if e in MODE_RUNS]
    for rep in range(1, cfg.repeat + 1):
        for own in OWN_RUNS:
            which = tuple(e for e in own.experiments if e in cfg.experiments)
            if which:
                _own(own, which, cfg, rep, doc, lambda: _save(out, doc))
        for mode in order(list(cfg.modes), rep) if modes else ():
            say(f"rep {rep}/{cfg.repeat} {mode}: starting a fresh control plane")
            record: dict[str, Any] = {"mode": mode, "rep": rep}
            doc["runs"].append(record)
            try:
                run_one(record, cfg, lambda: _save(out, doc))
            except localcluster.ClusterError as e:  # a cluster that did not start: go on
                record["error"] = str(e)[:2000]
                say(f"rep {rep} {mode}: no cluster: {e}")
            _save(out, doc)
    doc["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    _save(out, doc)
    print(report.write(out, doc))
    return 0


def _own(
    own: Own,
    which: tuple[str, ...],
    cfg: Config,
    rep: int,
    doc: dict[str, Any],
    save: Callable[[], None],
) -> None:
    """The selected experiments `which` of `own`, its approaches in turn (the first
    rotating), each approach's run recorded."""
    name = "/".join(which)
    for approach in order(list(own.approaches(cfg)), rep):
        say(f"rep {rep}/{cfg.repeat} {name} {approach}: starting a fresh control plane")
        record: dict[str, Any] = {"approach": approach, "rep": rep}
        doc["runs"].append(record)
        started = time.monotonic()
        try:
            with environment.LoadSampler() as load:
                record.update(own.run(cfg, approach, rep, which))
            record["load_average"] = load.summary()
        except (*_FAILED, localcluster.ClusterError) as e:  # say so, and go on
            record["error"] = str(e)[:2000]
            say(f"rep {rep} {name} {approach} failed: {e}")
        record[f"{name}_seconds"] = round(time.monotonic() - started, 1)
        save()


def _save(out: Path, doc: Mapping[str, Any]) -> None:
    (out / "results.json").write_text(json.dumps(doc, indent=2) + "\n")


def run_one(record: dict[str, Any], cfg: Config, save: Callable[[], None]) -> None:
    """Fill `record` (its mode and repetition) from one cluster, every selected experiment
    on it; `save` after each, so a campaign cut short keeps what it measured."""
    mode, rep = record["mode"], record["rep"]
    footing = approaches.Footing(
        nodes=cfg.nodes, node_cpu=cfg.node_cpu, node_memory=cfg.node_memory
    )
    with tempfile.TemporaryDirectory(prefix=f"escher-paper-{mode}-") as tmp:
        info = localcluster.up(approaches.cluster_spec(mode, Path(tmp) / "c", footing))
        try:
            assert info.extender_url is not None, f"mode {mode} serves no policy API"
            with (
                PolicyClient(info.extender_url, info.token, timeout=120) as policy,
                environment.LoadSampler() as load,
            ):
                ctx = Context(
                    info, api_client(info.kubeconfig), policy, random.Random(_seed(cfg, rep)), rep
                )
                _warm_up(ctx)
                for name in (e for e in cfg.experiments if e in MODE_RUNS):
                    started = time.monotonic()
                    try:
                        MODE_RUNS[name](ctx, cfg, record.setdefault(name, {}))
                    except _FAILED as e:  # a run that failed: say so, and go on
                        record[name]["error"] = str(e)[:2000]
                        ctx.progress(f"{name} failed: {e}")
                    record[f"{name}_seconds"] = round(time.monotonic() - started, 1)
                    save()
            record["load_average"] = load.summary()
        finally:
            localcluster.down(info.dir)


def _warm_up(ctx: Context) -> None:
    """Connections, caches and the service's first calls: one small E7, not counted."""
    e7_creation.measure(dataclasses.replace(ctx, rep=0), 5, 1)
    ctx.progress("warmed up")
