"""Restart without loss: SIGKILL the extender with resources and allocations in place,
start it again, and check that nothing was lost or double-counted and no node went over
capacity. On the real local control plane, in every mode with a write-back (dra: the
ResourceSlices are what the ledger is rebuilt from)."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from builders import cluster_of

from escher_harness import localcluster
from escher_harness.kubeclient import api_client
from escher_harness.localcluster.processes import is_running
from escher_harness.workload import Workload, pod_manifest
from extender.esl.client import PolicyClient

pytestmark = pytest.mark.e2e


def _ephemeral(policy: PolicyClient, domain: str) -> dict[str, dict[str, tuple[int, int]]]:
    return {
        node: {
            r: (u.capacity, u.allocated) for r, u in resources.items() if r.startswith(domain + "/")
        }
        for node, resources in policy.cluster_state().nodes.items()
    }


@pytest.mark.parametrize("mode", ["extender", "pure", "dra"])
def test_sigkill_and_restart_loses_nothing(mode: str, tmp_path: Path) -> None:
    info = localcluster.up(
        localcluster.ClusterSpec(dir=tmp_path / "c", nodes=3, **cluster_of(mode))
    )
    try:
        assert info.extender_url and info.token
        work = Workload(api_client(info.kubeconfig))
        d = info.resource_domain
        with PolicyClient(info.extender_url, info.token) as policy:
            policy.set_resource("r1", 3, node="node-0")
            policy.set_resource("r1", 2, node="node-1")
            policy.set_resource("r2", 1)
            pods = {f"a{i}": f"{d}/r1" for i in range(4)} | {f"b{i}": f"{d}/r2" for i in range(2)}
            for name, res in pods.items():
                work.create(pod_manifest(name, limits={res: "1"}))
            work.wait(pods, timeout=60)
            # The extender counts a pod once its own watch has seen it bound, which may be a
            # moment after the test's watch did.
            deadline = time.monotonic() + 10
            while True:
                before = _ephemeral(policy, d)
                held = {
                    r: sum(v.get(f"{d}/{r}", (0, 0))[1] for v in before.values())
                    for r in ("r1", "r2")
                }
                if held == {"r1": 4, "r2": 2}:
                    break
                assert time.monotonic() < deadline, before
                time.sleep(0.1)

        old = next(p for p in info.processes if p.name == "extender")
        info = localcluster.restart_component(info.dir, "extender", kill_signal=signal.SIGKILL)
        assert not is_running(old)
        assert info.extender_url and info.token

        with PolicyClient(info.extender_url, info.token) as policy:
            after = _ephemeral(policy, d)
            assert after == before  # capacities and allocations, nothing lost or doubled
            # The remaining unit of r1 (5 - 4) is still usable, and only it.
            more = [f"c{i}" for i in range(3)]
            for name in more:
                work.create(pod_manifest(name, limits={f"{d}/r1": "1"}))
            placed = work.wait(more, timeout=60, bound=1, settle=3.0)
            assert sum(1 for p in placed.values() if p.node) == 1
            final = _ephemeral(policy, d)
        for node, resources in final.items():
            for res, (cap, allocated) in resources.items():
                assert allocated <= cap, f"{node} {res}: {allocated} > {cap}"
        bound_r1 = Counter(
            p.node
            for p in work.placements([*pods, *more]).values()
            if p.node and (p.name.startswith("a") or p.name.startswith("c"))
        )
        assert bound_r1 == {"node-0": 3, "node-1": 2}
        # the written-back capacities survived in the cluster too
        if mode == "dra":
            assert work.published(d, f"{d}/resource")["node-0"] == {"r1": 3, "r2": 1}
        else:
            assert work.node_resources("node-0", d + "/")["allocatable"] == {
                f"{d}/r1": "3",
                f"{d}/r2": "1",
            }
    finally:
        localcluster.down(info.dir, keep_logs=True)
