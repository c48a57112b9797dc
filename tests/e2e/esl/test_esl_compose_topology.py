"""The composition no peer scheduler expresses, end to end on the extender approach: ONE
AND-composition of a gang requiring a rack, hierarchical fair sharing and anti-affinity.

Five 4-cpu nodes in two racks, rack-000 of three nodes and rack-001 of two. Alice's gang of
three 2-cpu members is anti-affine: alone, best fit would pack it 2+1 into rack-001; with
anti-affinity only rack-000 holds it, one member a node. Fair sharing by weight 2:1 gives
alice ten of fifteen slots (two units a node: her share alone would not spread the gang) and
bob five: alice's gang and her other pods together stay within ten while bob still gets all
five of his.

Not the pure approach: there the gang's units are planned at apply() from cpu, memory and
pods alone (the gang is no Placer: `constrain` does not exist for it), so it picks rack-001
2+1, anti-affinity keeps the third member pending, and re-plans stay in rack-001.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
from esl_harness import Env

from escher_harness import localcluster
from escher_harness.localcluster.fakenodes import Topology
from escher_harness.waits import until
from extender.esl.antiaffinity import AntiAffinity, AntiAffinityParams
from extender.esl.compose import Compose, ComposeParams
from extender.esl.fairshare import FairShare, FairShareParams, Group
from extender.esl.gang import GangESL, GangParams

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.parametrize(
        "cluster",
        [
            {
                "nodes": 5,
                "node_cpu": "4",
                "mode": "extender",
                "scope": "every-pod",
                "node_topology": Topology(3),
            }
        ],
        ids=["extender"],
        indirect=True,
    ),
]

RACK = "topology.kubernetes.io/rack"


@pytest.fixture
def rack_env(cluster: localcluster.ClusterInfo) -> Env:
    return Env("extender", cluster)


def test_gang_in_one_rack_and_fair_share_and_anti_affinity_compose(rack_env: Env) -> None:
    env = rack_env
    racks = {n: env.backend.cluster_state().labels.get(n, {}).get(RACK) for n in env.info.nodes}
    assert Counter(racks.values()) == {"rack-000": 3, "rack-001": 2}, racks
    users = {"alice": 2, "bob": 1}
    fair = FairShare(
        env.backend,
        FairShareParams(name="tenants", slots=15, groups={"all": Group(users=users)}),
    )
    gang = GangESL(
        env.backend,
        GangParams(name="train", members=3, cpu="2", memory="128Mi", required_topology="rack"),
    )
    spread = AntiAffinity(env.backend, AntiAffinityParams(name="train", pods=3))
    esl = Compose(env.backend, ComposeParams(name="train", op="and", pods=3), [gang, fair, spread])
    # Fair sharing creates its users' resources at its first step (alice two units on every
    # node, bob one), which the composition's first step takes.
    esl.apply()
    esl.step()
    everyone: list[str] = []
    try:
        members = env.pods(esl.requests_for("alice"), 3, prefix="train-")
        alone = fair.requests_for
        extra = env.pods(alone("alice"), 8, cpu="250m", prefix="alice-")
        bob = env.pods(alone("bob"), 5, cpu="250m", prefix="bob-")
        everyone += members + extra + bob
        deadline = time.monotonic() + 30
        while True:  # until the fifteen slots are taken, stepping as the application would
            placed = env.work.placements(everyone)
            bound = sum(1 for p in placed.values() if p.node)
            if bound >= 15 or time.monotonic() > deadline:
                break
            esl.step()
            time.sleep(0.3)
        # No sixteenth pod can bind (rather than a wait in which one did not): once the ledger
        # has seen the fifteen bound, no node has a unit of alice's or bob's share free,
        # which every pod here asks for.
        shares = [fair.full("alice"), fair.full("bob")]

        def units() -> tuple[int, dict[str, int]]:
            """Units of the shares held, and those free by node and share."""
            nodes = env.backend.cluster_state().nodes
            got = [(n, r, res[r]) for n, res in nodes.items() for r in shares if r in res]
            free = {
                f"{n} {r}": u.capacity - u.allocated for n, r, u in got if u.allocated < u.capacity
            }
            return sum(u.allocated for _, _, u in got), free

        held, free = until(lambda: (h := units())[0] >= 15 and h, "the ledger seeing the fifteen")
        assert held == 15 and free == {}, (held, free)
        placed = env.work.placements(everyone)
        at = {n: p.node for n, p in placed.items()}

        # The gang: every member bound, all in one rack, no two on one node.
        assert all(at[m] for m in members), placed
        assert {racks[at[m]] for m in members} == {"rack-000"}, at
        assert len({at[m] for m in members}) == 3, at
        # Fair share: alice holds her ten slots (gang included) and no more; bob his five.
        assert sum(1 for n in extra if at[n]) == 7, placed
        assert all(at[n] for n in bob), placed
        # No node over its capacity (cpu, every ephemeral resource).
        cpu: Counter[str] = Counter()
        for n, node in at.items():
            if node:
                cpu[node] += 2000 if n in members else 250
        assert all(v <= 4000 for v in cpu.values()), cpu
        state = env.backend.cluster_state()
        for node, res in state.nodes.items():
            for r in esl.resources():
                if r in res:
                    assert res[r].allocated <= res[r].capacity, (node, r, res[r])
    finally:
        env.work.delete(everyone)
        esl.teardown()
