"""The gang-scheduling approaches the benchmark compares: each a cluster set-up on equal
footing, plus how to submit, start and delete one gang through the real API.

One module per family (extender, pure, default, coscheduling, native), each implementing
base.Approach and saying what its approaches are; one row per approach in registry.py,
which gives their names, order and colours. This module answers by an approach's name.

Topology (the `topology` preset): the footing labels the nodes into zones, blocks and racks,
and a scenario may ask each gang for its level (escher_harness.bench.topology) as required or
preferred; each approach module says how it carries the level (Coscheduling and default have
none).

Every gang is named `g<digits>` and its pods `<gang>-...`, so the recorder can tell a pod's
gang from its name alone, the same way for every approach. Called by the locustfile
(loadtests/gang_locustfile.py), escher_harness.bench.replay, gang_bench and gang_timeline.
"""

from __future__ import annotations

from pathlib import Path

from escher_harness import localcluster
from escher_harness.bench.approaches.base import Env, Footing, GangJob, Pods, start
from escher_harness.bench.approaches.registry import (
    APPROACHES,
    POLICY,
    get,
    policy_loc,
)

__all__ = [
    "APPROACHES",
    "POLICY",
    "Env",
    "Footing",
    "GangJob",
    "Pods",
    "cluster_spec",
    "delete",
    "get",
    "policy_loc",
    "start",
    "submit",
]


def cluster_spec(approach: str, dir: Path, footing: Footing) -> localcluster.ClusterSpec:
    return get(approach).cluster_spec(dir, footing)


def submit(approach: str, env: Env, job: GangJob) -> bool:
    """Submit `job` and return once it is complete (True) or given up (False)."""
    return get(approach).submit(env, job)


def delete(approach: str, env: Env, job: GangJob) -> None:
    get(approach).delete(env, job)
