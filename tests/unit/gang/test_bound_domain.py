"""A member created after its gang was bound (an operator replacing a deleted pod): kept to
the domain of the gang's required level its bound members are in (extender.gang.places.
within_bound, through GangManager.filter); an ordinary pod when the gang requires no level."""

from __future__ import annotations

import builders
import pytest
from builders import Clock, info

from extender.core.events import PodChange, PodEvent
from extender.core.ledger import Ledger
from extender.core.plugins import Verdict
from extender.core.pod import Keys, PodInfo
from extender.gang.manager import GangManager
from extender.gang.state import Phase

KEYS = Keys.for_domain("escher.io")
RACK = "topology.kubernetes.io/rack"
NODES = {"r0-a": "r0", "r0-b": "r0", "r1-a": "r1", "r1-b": "r1"}


@pytest.mark.parametrize(
    ("annotations", "bound_on", "passed"),
    [
        # Required rack, bound in r0: the newcomer goes only to r0's nodes.
        ({KEYS.gang_required_topology: "rack"}, ["r0-a", "r0-b"], ["r0-a", "r0-b"]),
        ({KEYS.gang_required_topology: RACK}, ["r1-b", "r1-b"], ["r1-a", "r1-b"]),
        # No required level (only a preferred one, or none): an ordinary pod, anywhere.
        ({KEYS.gang_preferred_topology: "rack"}, ["r0-a", "r0-b"], None),
        ({}, ["r0-a", "r0-b"], None),
    ],
)
def test_a_member_created_after_its_gang_was_bound_keeps_to_the_required_domain(
    annotations: dict[str, str], bound_on: list[str], passed: list[str] | None
) -> None:
    lg = Ledger("escher.io")
    for name, rack in NODES.items():
        lg.upsert_node(name, {RACK: rack}, {"cpu": 4000, "memory": 8 << 30, "pods": 10}, {}, ())
    gm = GangManager(lg, KEYS, clock=Clock())
    size = len(bound_on)

    def member(i: int, node: str = "") -> PodInfo:
        manifest = builders.member("g", i, size, node=node)
        manifest["metadata"]["annotations"].update(annotations)
        return info(manifest)

    for i, node in enumerate(bound_on):
        pod = member(i, node)
        gm.on_pod(PodEvent(PodChange.UPSERT, pod.uid, pod))
    g = gm.gang("default/g")
    assert g is not None and g.phase is Phase.BOUND
    verdict = gm.filter(member(size), list(NODES))
    if passed is None:
        assert verdict is None
        return
    assert isinstance(verdict, Verdict)
    assert verdict.passing(list(NODES)) == passed
    outside = set(NODES) - set(passed)
    assert set(verdict.rejected) == outside
    assert all("gang default/g is bound in rack" in r.reason for r in verdict.rejected.values())
