"""Gang declarations: gang_spec over labels, annotations and PodGroups (extender.gang.spec), the
in-memory index and its pod tracking (extender.gang.declarations), the manager re-learning a
group's pods when its object changes, and the PodGroup adapter's decoding and tolerance of an
API that is not served (extender.gang.kube.podgroups). Table-driven; no process, no cluster."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from builders import KEYS, info, pod

from extender.core.events import PodChange, PodEvent
from extender.core.ledger import Ledger
from extender.gang.declarations import (
    Declarations,
    GroupDeclaration,
    GroupKind,
    GroupRef,
)
from extender.gang.kube.podgroups import CoschedulingPodGroup, NativePodGroup, PodGroups
from extender.gang.manager import GangManager
from extender.gang.spec import GangPending, GangSpec, InvalidGang, gang_spec
from extender.gang.topology import DEFAULT, Level, parse
from extender.kube.client import ApiError
from extender.metrics import Metrics

H = parse(DEFAULT)
RACK = Level("rack", "topology.kubernetes.io/rack")
ZONE = Level("zone", "topology.kubernetes.io/zone")
NATIVE, COS = GroupKind.NATIVE, GroupKind.COSCHEDULING
PG = "scheduling.x-k8s.io/pod-group"


def member(
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    group: str | None = None,
) -> Any:
    spec: dict[str, Any] = {}
    if group is not None:
        spec["schedulingGroup"] = {"podGroupName": group}
    return info(pod("m", labels=labels, annotations=annotations, requests={"cpu": "1"}, **spec))


def index(**groups: GroupDeclaration) -> Declarations:
    """`native_<name>=` and `cos_<name>=` declarations in namespace default."""
    d = Declarations()
    for k, decl in groups.items():
        kind, _, name = k.partition("_")
        d.put(GroupRef(NATIVE if kind == "native" else COS, "default", name), decl)
    return d


MIN = KEYS.gang_min
REQ = KEYS.gang_required_topology
PREF = KEYS.gang_preferred_topology

VALID = [
    (
        "label and gang-min, as before",
        member({KEYS.gang: "g"}, {MIN: "3"}),
        index(),
        GangSpec("default", "g", 3, 60.0),
    ),
    (
        "native minCount",
        member(group="g"),
        index(native_g=GroupDeclaration(4)),
        GangSpec("default", "g", 4, 60.0),
    ),
    (
        "native topology key is a required level",
        member(group="g"),
        index(native_g=GroupDeclaration(4, None, RACK.key)),
        GangSpec("default", "g", 4, 60.0, RACK),
    ),
    (
        "native key outside the hierarchy is a level of its own",
        member(group="g"),
        index(native_g=GroupDeclaration(2, None, "example.com/pod")),
        GangSpec("default", "g", 2, 60.0, Level("example.com/pod", "example.com/pod")),
    ),
    (
        "native basic policy is no gang",
        member(group="g"),
        index(native_g=GroupDeclaration(None)),
        None,
    ),
    (
        "scheduler-plugins minMember and timeout, no gang-min",
        member({PG: "g"}),
        index(cos_g=GroupDeclaration(3, 90.0)),
        GangSpec("default", "g", 3, 90.0),
    ),
    (
        "scheduler-plugins label without an object: the annotation, as before",
        member({PG: "g"}, {MIN: "2"}),
        index(),
        GangSpec("default", "g", 2, 60.0),
    ),
    (
        "sources that agree",
        member({KEYS.gang: "g"}, {MIN: "4", REQ: "rack"}, group="g"),
        index(native_g=GroupDeclaration(4, None, RACK.key)),
        GangSpec("default", "g", 4, 60.0, RACK),
    ),
    (
        "required and preferred annotations by name",
        member({KEYS.gang: "g"}, {MIN: "2", REQ: "zone", PREF: "rack"}),
        index(),
        GangSpec("default", "g", 2, 60.0, ZONE, RACK),
    ),
    ("no gang at all", member(), index(), None),
]


@pytest.mark.parametrize(
    ("pod", "groups", "want"), [v[1:] for v in VALID], ids=[v[0] for v in VALID]
)
def test_gang_spec_reads_every_declaration(
    pod: Any, groups: Declarations, want: GangSpec | None
) -> None:
    assert gang_spec(pod, KEYS, H, groups) == want


REFUSED = [
    (
        "label and schedulingGroup name different gangs",
        member({KEYS.gang: "a"}, {MIN: "2"}, group="b"),
        index(native_g=GroupDeclaration(2)),
        InvalidGang,
        [
            "gang conflict",
            "label escher.io/gang says a",
            "spec.schedulingGroup.podGroupName says b",
        ],
    ),
    (
        "gang-min disagrees with minCount",
        member({KEYS.gang: "g"}, {MIN: "3"}, group="g"),
        index(native_g=GroupDeclaration(4)),
        InvalidGang,
        ["gang conflict", "escher.io/gang-min says 3", "minCount says 4"],
    ),
    (
        "gang-min disagrees with minMember",
        member({PG: "g"}, {MIN: "3"}),
        index(cos_g=GroupDeclaration(5)),
        InvalidGang,
        ["gang conflict", "says 3", "spec.minMember says 5"],
    ),
    (
        "gang-timeout disagrees with scheduleTimeoutSeconds",
        member({PG: "g"}, {KEYS.gang_timeout: "30"}),
        index(cos_g=GroupDeclaration(2, 90.0)),
        InvalidGang,
        ["gang conflict", "scheduleTimeoutSeconds"],
    ),
    (
        "label's required level disagrees with the PodGroup's",
        member({KEYS.gang: "g"}, {REQ: "zone"}, group="g"),
        index(native_g=GroupDeclaration(2, None, RACK.key)),
        InvalidGang,
        ["gang conflict", "requires zone", "requires rack"],
    ),
    (
        "native PodGroup not there yet",
        member(group="g"),
        index(),
        GangPending,
        ["podgroups.scheduling.k8s.io default/g", "does not exist"],
    ),
    (
        "scheduler-plugins PodGroup not there, no gang-min",
        member({PG: "g"}),
        index(),
        GangPending,
        ["podgroups.scheduling.x-k8s.io default/g", "does not exist", "escher.io/gang-min"],
    ),
    (
        "label on a basic-policy PodGroup",
        member({KEYS.gang: "g"}, {MIN: "2"}, group="g"),
        index(native_g=GroupDeclaration(None)),
        InvalidGang,
        ["gang conflict", "basic policy"],
    ),
    (
        "unknown level name lists the hierarchy",
        member({KEYS.gang: "g"}, {MIN: "2", REQ: "pod"}),
        index(),
        InvalidGang,
        [
            "'pod' is no topology level",
            "zone (topology.kubernetes.io/zone)",
            "host (kubernetes.io/hostname)",
        ],
    ),
    (
        "minMember out of range",
        member({PG: "g"}),
        index(cos_g=GroupDeclaration(0)),
        InvalidGang,
        ["spec.minMember must be in 1..10000"],
    ),
    (
        "label without any minimum",
        member({KEYS.gang: "g"}),
        index(),
        InvalidGang,
        ["no escher.io/gang-min"],
    ),
]


@pytest.mark.parametrize(
    ("pod", "groups", "error", "words"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED]
)
def test_gang_spec_refuses_conflicts_naming_both_sides(
    pod: Any, groups: Declarations, error: type[InvalidGang], words: list[str]
) -> None:
    with pytest.raises(error) as e:
        gang_spec(pod, KEYS, H, groups)
    for w in words:
        assert w in str(e.value)


def test_index_tracks_groups_and_the_pods_naming_them() -> None:
    changed: list[list[str]] = []
    d = Declarations(lambda pods: changed.append(sorted(p.name for p in pods)))
    ref = GroupRef(NATIVE, "default", "g")
    p = member(group="g")
    d.on_pod(PodEvent(PodChange.UPSERT, p.uid, p))
    d.put(ref, GroupDeclaration(2))
    d.put(ref, GroupDeclaration(2))  # unchanged: no notice
    assert d.get(ref) == GroupDeclaration(2) and changed == [["m"]]
    d.listed(NATIVE, [])  # deleted while not watched
    assert d.get(ref) is None and changed == [["m"], ["m"]]
    d.on_pod(PodEvent(PodChange.GONE, p.uid, None))
    d.put(ref, GroupDeclaration(3))
    assert d.naming(ref) == [] and changed == [["m"], ["m"]] and len(d) == 1
    d.replace(NATIVE, {})
    assert len(d) == 0


def test_manager_relearns_a_gang_whose_podgroup_arrives_later() -> None:
    d = Declarations()
    ledger = Ledger("escher.io")
    gm = GangManager(ledger, KEYS, groups=d)
    d.on_change = gm.redeclared
    p = member(group="g")
    for sub in (d.on_pod, gm.on_pod):
        sub(PodEvent(PodChange.UPSERT, p.uid, p))
    assert gm.gang("default/g") is None  # waits for its PodGroup
    d.put(GroupRef(NATIVE, "default", "g"), GroupDeclaration(3))
    g = gm.gang("default/g")
    assert g is not None and g.spec.min_members == 3
    d.put(GroupRef(NATIVE, "default", "g"), GroupDeclaration(2))
    assert g.spec.min_members == 2


@pytest.mark.parametrize(
    ("body", "want"),
    [
        ({"spec": {"schedulingPolicy": {"gang": {"minCount": 4}}}}, GroupDeclaration(4)),
        ({"spec": {"schedulingPolicy": {"basic": {}}}}, GroupDeclaration(None)),
        (
            {
                "spec": {
                    "schedulingPolicy": {"gang": {"minCount": 2}},
                    "schedulingConstraints": {"topology": [{"key": RACK.key}]},
                    "disruptionMode": {"all": {}},
                    "priorityClassName": "high",
                }
            },
            GroupDeclaration(2, None, RACK.key),
        ),
    ],
)
def test_native_podgroup_decodes_to_its_declaration(
    body: dict[str, Any], want: GroupDeclaration
) -> None:
    obj = msgspec.json.decode(
        msgspec.json.encode({"metadata": {"name": "g"}, **body}), type=NativePodGroup
    )
    assert obj.declaration() == want


def test_scheduler_plugins_podgroup_decodes_to_its_declaration() -> None:
    body = {"spec": {"minMember": 3, "scheduleTimeoutSeconds": 30, "minResources": {"cpu": "3"}}}
    obj = msgspec.json.decode(msgspec.json.encode(body), type=CoschedulingPodGroup)
    assert obj.declaration() == GroupDeclaration(3, 30.0)


class _NotServed:
    """A KubeAPI whose every list answers 404, as when neither PodGroup API is served."""

    calls = 0

    async def request(self, method: str, path: str, **_: Any) -> bytes:
        self.calls += 1
        raise ApiError(404, "the server could not find the requested resource", path)


def test_podgroups_not_served_is_no_error_and_is_listed_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = _NotServed()
    d = Declarations()
    groups = PodGroups(api, d, Metrics(), retry_seconds=0.01)  # type: ignore[arg-type]

    async def go() -> None:
        await groups.sync()
        task = asyncio.create_task(groups.run())
        await asyncio.sleep(0.1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    caplog.set_level("INFO")
    asyncio.run(go())
    assert len(d) == 0 and all(k.served is False for k in groups.kinds)
    assert api.calls > 4  # retried
    said = [r for r in caplog.records if "not served" in r.getMessage()]
    assert len(said) == 2  # once per kind, not at every retry
