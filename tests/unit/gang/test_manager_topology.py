"""Topology through the gang manager: the members' annotations reach the planner, whose
choice the reservation keeps; bad declarations are refused with a reason and reserve nothing;
reserved nodes are nominated to the members kube-scheduler has not tried yet, and the
nominations are cleared when the places go."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import builders
import pytest
from builders import Clock, info

from extender.core.events import PodChange, PodEvent
from extender.core.ledger import HolderKind, Ledger
from extender.core.plugins import Verdict
from extender.core.pod import Keys, PodInfo
from extender.gang.manager import GangManager
from extender.gang.state import Phase

KEYS = Keys.for_domain("escher.io")
RACK = "topology.kubernetes.io/rack"
BLOCK = "cloud.google.com/gce-topology-block"


def racks(per_rack: dict[str, int], cpu: int = 2000) -> tuple[Ledger, dict[str, str]]:
    """Nodes of `cpu` millicores in racks (rack name -> nodes), two racks to a block."""
    lg, rack_of = Ledger("escher.io"), {}
    for r, (rack, n) in enumerate(per_rack.items()):
        for i in range(n):
            name = f"{rack}-n{i}"
            labels = {RACK: rack, BLOCK: f"b{r // 2}"}
            lg.upsert_node(name, labels, {"cpu": cpu, "memory": 8 << 30, "pods": 10}, {}, ())
            rack_of[name] = rack
    return lg, rack_of


def member(gang: str, i: int, size: int, **annotations: str) -> PodInfo:
    manifest = builders.member(gang, i, size)
    manifest["metadata"]["annotations"].update(annotations)
    return info(manifest)


def upsert(gm: GangManager, pod: PodInfo) -> None:
    gm.on_pod(PodEvent(PodChange.UPSERT, pod.uid, pod))


def reserve(gm: GangManager, pods: list[PodInfo], nodes: list[str]) -> Any:
    for p in pods:
        upsert(gm, p)
    gm.filter(pods[0], nodes)
    return gm.gang(f"default/{pods[0].gang}")


REQUIRED, PREFERRED = KEYS.gang_required_topology, KEYS.gang_preferred_topology


@pytest.mark.parametrize(
    ("racks_", "size", "annotations", "want_racks"),
    [
        # Best fit: the smallest rack that holds the gang, so the big one stays whole.
        ({"r0": 4, "r1": 2, "r2": 3}, 4, {REQUIRED: "rack"}, {"r1"}),
        ({"r0": 4, "r1": 2, "r2": 3}, 6, {REQUIRED: RACK}, {"r2"}),  # by label key too
        # Preferred: fewest racks (two of 2 cpu per node: rack r0 takes 8), then best effort.
        ({"r0": 4, "r1": 2, "r2": 3}, 8, {PREFERRED: "rack"}, {"r0"}),
        ({"r0": 4, "r1": 2, "r2": 3}, 10, {PREFERRED: "rack"}, {"r0", "r1"}),
        # Required block, preferred rack inside it: b0 (r0, r1) holds only 6, so b1; r2 alone.
        ({"r0": 1, "r1": 2, "r2": 4, "r3": 1}, 7, {REQUIRED: "block", PREFERRED: "rack"},
         {"r2"}),
    ],
)  # fmt: skip
def test_a_gangs_levels_shape_its_reservation(
    racks_: dict[str, int], size: int, annotations: dict[str, str], want_racks: set[str]
) -> None:
    lg, rack_of = racks(racks_)
    gm = GangManager(lg, KEYS, clock=Clock())
    pods = [member("g", i, size, **annotations) for i in range(size)]
    g = reserve(gm, pods, lg.node_names())
    assert g.phase is Phase.RESERVED, g.reason
    assert {rack_of[s.node] for s in g.slots.values()} == want_racks
    assert lg.totals().holdings[HolderKind.RESERVATION] == size


@pytest.mark.parametrize(
    ("annotations", "reason"),
    [
        ({REQUIRED: "rack"}, "no rack has room for 9 member(s)"),
        ({REQUIRED: "shelf"}, "'shelf' is no topology level"),
        ({REQUIRED: "rack", PREFERRED: "block"}, "must lie inside the required level rack"),
    ],
)
def test_a_gang_that_cannot_honour_its_levels_says_why_and_reserves_nothing(
    annotations: dict[str, str], reason: str
) -> None:
    lg, _ = racks({"r0": 4, "r1": 3})
    gm = GangManager(lg, KEYS, clock=Clock())
    pods = [member("g", i, 9, **annotations) for i in range(9)]
    for p in pods:
        upsert(gm, p)
    verdict = gm.filter(pods[0], lg.node_names())
    assert verdict is not None
    why = {r.reason for r in verdict.rejected.values()}
    assert len(why) == 1 and reason in why.pop()
    assert all(r.unresolvable for r in verdict.rejected.values())  # never retried for ever
    assert lg.totals().holdings[HolderKind.RESERVATION] == 0


def test_the_largest_domain_is_named_when_the_gang_can_never_fit() -> None:
    lg, _ = racks({"r0": 4, "r1": 3})
    gm = GangManager(lg, KEYS, clock=Clock())
    pods = [member("g", i, 9, **{REQUIRED: "rack"}) for i in range(9)]
    upsert(gm, pods[0])
    gm.filter(pods[0], lg.node_names())
    g = gm.gang("default/g")
    assert g is not None and "can never fit" in g.reason
    assert "the largest takes 8 (rack r0)" in g.reason


class Nominations:
    """The writer: what was sent, and the `wanted` of each delayed one (by pod name)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.later: dict[str, Callable[[], bool]] = {}

    def __call__(self, pod: PodInfo, node: str, wanted: Callable[[], bool] | None = None) -> None:
        self.sent.append((pod.name, node))
        if wanted is not None:
            self.later[pod.name] = wanted


def test_reserved_nodes_are_nominated_to_the_members_not_in_a_cycle_and_cleared_on_release() -> (
    None
):
    lg, _ = racks({"r0": 4})
    gm = GangManager(lg, KEYS, clock=Clock())
    gm.nominate = nominated = Nominations()
    pods = [member("g", i, 4) for i in range(3)]
    g = reserve(gm, pods, lg.node_names())
    place = {s.member: s.node for s in g.slots.values()}
    # The asking member is in its cycle: only the two others are nominated, once each.
    assert sorted(nominated.sent) == [("g-1", place["g-1-uid"]), ("g-2", place["g-2-uid"])]
    gm.filter(pods[1], lg.node_names())
    assert len(nominated.sent) == 2
    # A member created later takes a place kept for it, and its nomination is written.
    late = member("g", 3, 4)
    upsert(gm, late)
    (slot,) = [s for s in g.slots.values() if s.member == late.uid]
    assert nominated.sent[-1] == ("g-3", slot.node)
    assert {n: wanted() for n, wanted in nominated.later.items()} == {
        "g-1": False,  # its filter came first
        "g-2": True,
        "g-3": True,
    }
    # One member bound; then the reservation expires: the others' nominations are cleared.
    gm.bound(pods[1].uid, place["g-1-uid"])
    nominated.sent.clear()
    gm.clock.now += 60  # type: ignore[attr-defined]
    gm.expire()
    assert sorted(nominated.sent) == [("g-2", ""), ("g-3", "")]


@pytest.mark.parametrize(
    ("then", "wanted"),
    [
        ("nothing", True),  # still waiting for its cycle: the nomination is worth its patch
        ("filtered", False),  # its cycle came first and gave it its place
        ("bound", False),
        ("gone", False),
        ("released", False),  # the places are given back
    ],
)
def test_a_delayed_nomination_is_written_only_while_the_member_still_waits_for_its_cycle(
    then: str, wanted: bool
) -> None:
    """Members that kube-scheduler may try at once (ungated, created after or known at the
    reservation) get their nomination a moment later, and only if their filter has not come
    first; one not written is not cleared either (no patch for nothing)."""
    lg, _ = racks({"r0": 4})
    gm = GangManager(lg, KEYS, clock=Clock())
    gm.nominate = nominated = Nominations()
    pods = [member("g", i, 2) for i in range(2)]
    g = reserve(gm, pods, lg.node_names())
    node = {s.member: s.node for s in g.slots.values()}[pods[1].uid]
    assert nominated.sent == [("g-1", node)] and list(nominated.later) == ["g-1"]
    if then == "filtered":
        gm.filter(pods[1], lg.node_names())
    elif then == "bound":
        gm.bound(pods[1].uid, node)
    elif then == "gone":
        gm.on_pod(PodEvent(PodChange.GONE, pods[1].uid, None))
    elif then == "released":
        g.expires = 0
        gm.expire()
    assert nominated.later["g-1"]() is wanted
    sent = len(nominated.sent)
    g.expires = 0
    gm.expire()  # a release clears only the nominations written
    cleared = [n for n in nominated.sent[sent:] if n == ("g-1", "")]
    assert cleared == ([("g-1", "")] if wanted else [])


def test_a_nomination_kube_scheduler_cleared_is_written_again_while_the_place_is_held() -> None:
    lg, _ = racks({"r0": 4})
    gm = GangManager(lg, KEYS, clock=Clock())
    gm.nominate = nominated = Nominations()
    pods = [member("g", i, 2) for i in range(2)]
    g = reserve(gm, pods, lg.node_names())
    ((who, node),) = nominated.sent
    assert who == "g-1"
    upsert(gm, PodInfo(**{**_fields(pods[1]), "nominated": ""}))  # before the patch landed
    assert len(nominated.sent) == 1  # not sent again
    upsert(gm, PodInfo(**{**_fields(pods[1]), "nominated": node}))  # the informer shows it
    assert len(nominated.sent) == 1
    upsert(gm, PodInfo(**{**_fields(pods[1]), "nominated": ""}))  # a failed bind cleared it
    assert nominated.sent[-1] == ("g-1", node) and len(nominated.sent) == 2
    gm.expire()
    g.expires = 0
    gm.clock.now += 1  # type: ignore[attr-defined]
    gm.expire()  # released: the nomination is cleared by the extender itself
    assert nominated.sent[-1] == ("g-1", "")
    upsert(gm, PodInfo(**{**_fields(pods[1]), "nominated": ""}))
    assert nominated.sent[-1] == ("g-1", "")  # not written again: no place is held


@pytest.mark.parametrize("assigned", [True, False], ids=["its-place", "a-place-to-come"])
def test_a_stale_nomination_tried_alone_is_turned_away_without_planning_again(
    assigned: bool,
) -> None:
    """kube-scheduler tries a member's nominated node alone, then every node. A nomination of
    an earlier place (not yet rewritten) is refused there, the gang keeps its reservation, and
    the member gets its place from every node: one stale nomination must not make a gang of
    1,024 give back its places and plan again."""
    lg, _ = racks({"r0": 4})
    gm = GangManager(lg, KEYS, clock=Clock())
    pods = [member("g", i, 3) for i in range(3 if assigned else 1)]
    g = reserve(gm, pods, lg.node_names())
    asking = pods[-1] if assigned else member("g", 2, 3)
    place = {s.member: s.node for s in g.slots.values()}.get(asking.uid)
    stale = next(
        n for n in lg.node_names() if n != place and n not in {s.node for s in g.slots.values()}
    )
    asked = PodInfo(**{**_fields(asking), "nominated": stale})
    attempts = g.attempts
    verdict = gm.filter(asked, [stale])
    assert isinstance(verdict, Verdict) and set(verdict.rejected) == {stale}
    assert "not its nominated node" in verdict.rejected[stale].reason
    assert g.attempts == attempts and lg.totals().holdings[HolderKind.RESERVATION] == 3
    then = gm.filter(asked, lg.node_names())
    assert isinstance(then, Verdict) and then.only is not None
    assert then.only[0] in {s.node for s in g.slots.values()} and g.attempts == attempts


def _fields(p: PodInfo) -> dict[str, Any]:
    return {f: getattr(p, f) for f in PodInfo.__slots__}


@pytest.mark.parametrize(
    ("annotations", "full", "to_rack", "planned_again"),
    [
        # Required rack: the place moves inside the rack while it has room ...
        ({REQUIRED: "rack"}, [], "r0", False),
        # ... and the gang is planned again (in the other rack) when it has none.
        ({REQUIRED: "rack"}, ["r0-n1", "r0-n2"], "r1", True),
        # Preferred rack: a node of the same rack first, else of another; never planned again.
        ({PREFERRED: "rack"}, [], "r0", False),
        ({PREFERRED: "rack"}, ["r0-n1", "r0-n2"], "r1", False),
    ],
)  # fmt: skip
def test_a_refused_place_moves_to_an_offered_node_of_its_domain(
    annotations: dict[str, str], full: list[str], to_rack: str, planned_again: bool
) -> None:
    """kube-scheduler's own filters refused a member's reserved node (it is not offered):
    the member's place moves to an offered node with room, the rest of the gang keeps its
    places; only when the required domain has none is the gang planned again."""
    lg, rack_of = racks({"r0": 3, "r1": 3})
    for node in full:
        lg.observe_bound(f"filler-{node}", node, {"cpu": 2000})
    gm = GangManager(lg, KEYS, clock=Clock())
    pods = [member("g", i, 2, **annotations) for i in range(2)]
    g = reserve(gm, pods, lg.node_names())
    assert {rack_of[s.node] for s in g.slots.values()} == {"r0"}, g.reason
    place = next(s.node for s in g.slots.values() if s.member == pods[1].uid)
    offered = [n for n in lg.node_names() if n != place]
    verdict = gm.filter(pods[1], offered)
    assert isinstance(verdict, Verdict) and verdict.only is not None
    (node,) = verdict.only
    assert rack_of[node] == to_rack and node != place
    assert (g.attempts == 2) is planned_again
    assert lg.totals().holdings[HolderKind.RESERVATION] == 2
    assert node in {s.node for s in g.slots.values() if s.member == pods[1].uid}
