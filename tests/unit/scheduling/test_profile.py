"""extender.scheduling.profile: each mistake in kube-scheduler's configuration is said, with
where it is, and the shipped configurations have none (tests/unit/test_deploy_manifests.py
checks deploy/'s and the chart's)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.core.pod import Keys
from extender.gang.args import GangArgs
from extender.scheduling.profile import extender_entries, problems

KEYS = Keys.for_domain("escher.io")
REPO = Path(__file__).resolve().parents[3]
SPLIT = yaml.safe_load((REPO / "scheduler-config" / "extender-split.yaml").read_text())
EVERY_POD = yaml.safe_load((REPO / "scheduler-config" / "extender.yaml").read_text())
WAIT = GangArgs().wait_seconds


def changed(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """`base` with the value at dotted `path` (list indexes as numbers) set, or deleted if
    `value` is ...; a copy."""
    out = copy.deepcopy(base)
    *parents, last = path.split(".")
    node: Any = out
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    key_: Any = int(last) if isinstance(node, list) else last
    if value is ...:
        del node[key_]
    else:
        node[key_] = value
    return out


@pytest.mark.parametrize(
    ("config", "where", "says"),
    [
        (changed(SPLIT, "extenders.0.managedResources.0.name", "scheduling.escher.io/extender"),
         "extenders[0].managedResources", "is no marker of this extender"),
        (changed(SPLIT, "extenders.0.managedResources.0.ignoredByScheduler", False),
         "extenders[0].managedResources", "needs ignoredByScheduler: true"),
        (changed(SPLIT, "extenders.2.ignorable", True), "extenders[2].ignorable",
         "must be false"),
        (changed(SPLIT, "extenders.1.bindVerb", ...), "extenders[1].bindVerb",
         "bind gang members one by one"),
        (changed(SPLIT, "extenders.0.filterVerb", ...), "extenders[0].filterVerb",
         "without their reserved places"),
        (changed(SPLIT, "extenders.2.bindVerb", "bind"), "extenders[2].bindVerb",
         "sent for pods that are not gang members"),
        (changed(SPLIT, "extenders.1.httpTimeout", "10s"), "extenders[1].httpTimeout",
         "not longer than gang_wait_seconds"),
        (changed(EVERY_POD, "extenders.1.httpTimeout", "9500ms"), "extenders[1].httpTimeout",
         "not longer than gang_wait_seconds"),
        # A filter held as long as a bind would hold every pod's scheduling cycle.
        (changed(SPLIT, "extenders.0.httpTimeout", "30s"), "extenders[0].httpTimeout",
         "for a filter"),
        (changed(EVERY_POD, "extenders.0.httpTimeout", "1m"), "extenders[0].httpTimeout",
         "for a filter"),
        (changed(SPLIT, "extenders.1.filterVerb", "filter"), "extenders[1].filterVerb",
         "a second filter"),
        (changed(SPLIT, "extenders.2.weight", 0), "extenders[2].weight", "must be > 0"),
        (changed(SPLIT, "extenders.2.managedResources.0.name", KEYS.gang_marker), "extenders",
         "no entry scores"),
        (changed(SPLIT, "extenders.0.managedResources.0.name", KEYS.score_marker), "extenders",
         "no entry manages scheduling.escher.io/gang"),
        # No profile looks at every node: gang members' reserved nodes go unsent.
        (changed(SPLIT, "profiles.1.percentageOfNodesToScore", ...), "percentageOfNodesToScore",
         "adaptive"),
        (changed(EVERY_POD, "percentageOfNodesToScore", 50), "percentageOfNodesToScore", "50"),
        (changed(SPLIT, "profiles.1.percentageOfNodesToScore", 30),
         "profiles[1].percentageOfNodesToScore", "30"),
        ({"extenders": "x"}, "extenders", "must be a list"),
        # Wrongly typed: said where, never a traceback, never silently skipped.
        (changed(SPLIT, "extenders.0.managedResources", KEYS.gang_marker),
         "extenders[0].managedResources", "must be a list of"),
        (changed(SPLIT, "extenders.1.managedResources", [{"name": 3}]),
         "extenders[1].managedResources", "must be a list of"),
        (changed(SPLIT, "extenders.0.httpTimeout", 15), "extenders[0].httpTimeout",
         "is not a duration"),
        (changed(SPLIT, "extenders.0.httpTimeout", "-5s"), "extenders[0].httpTimeout",
         "is not a duration"),
        ({**SPLIT, "clientConnection": {"qps": "abc"}}, "clientConnection.qps",
         "is not a positive number"),
        ({**SPLIT, "clientConnection": {"qps": -1}}, "clientConnection.qps",
         "is not a positive number"),
        ({**SPLIT, "clientConnection": {"qps": float("inf")}}, "clientConnection.qps",
         "is not a positive number"),
    ],
)  # fmt: skip
def test_each_mistake_is_said_where_it_is(config: dict[str, Any], where: str, says: str) -> None:
    found = problems(config, KEYS, gang_wait_seconds=10.0)
    assert [p.where for p in found if says in p.message] == [where], found


@pytest.mark.parametrize("config", [SPLIT, EVERY_POD], ids=["split", "every-pod"])
def test_the_shipped_local_configurations_have_no_mistake(config: dict[str, Any]) -> None:
    assert problems(config, KEYS, gang_wait_seconds=WAIT) == []
    assert extender_entries(config, KEYS)


@pytest.mark.parametrize(
    ("timeout", "where", "says"),
    [
        ("15s", "extenders[0].httpTimeout", "not longer than gang_wait_seconds"),
        ("75s", "extenders[0].httpTimeout", "for a filter"),
    ],
)
def test_one_entry_cannot_both_filter_and_wait_at_bind(timeout: str, where: str, says: str) -> None:
    """The earlier layout, filter and bind in one entry: its httpTimeout is either too short
    for a gang to gather at bind or too long for a filter, with the default wait."""
    config = copy.deepcopy(SPLIT)
    gang, _, score = config["extenders"]
    gang.update(bindVerb="bind", httpTimeout=timeout)
    config["extenders"] = [gang, score]
    found = problems(config, KEYS, gang_wait_seconds=WAIT)
    assert [p.where for p in found if says in p.message] == [where], found


@pytest.mark.parametrize(
    "config",
    [
        # The shipped split: one profile samples, the extender's looks at every node.
        SPLIT,
        # One profile for every pod, looking at every node (the layout before the split's).
        {**changed(SPLIT, "profiles", [{"schedulerName": "default-scheduler"}]),
         "percentageOfNodesToScore": 100},
        # The share set at the top, sampled where a profile says so.
        {**changed(SPLIT, "profiles.0.percentageOfNodesToScore", 20),
         "percentageOfNodesToScore": 100},
    ],
    ids=["split", "one-profile-every-node", "top-level-100"],
)  # fmt: skip
def test_a_profile_that_samples_is_no_mistake_beside_one_that_looks_at_every_node(
    config: dict[str, Any],
) -> None:
    assert problems(config, KEYS, gang_wait_seconds=WAIT) == []


def test_another_extender_and_a_configuration_without_this_one_are_left_alone() -> None:
    other = {"urlPrefix": "http://gpu", "filterVerb": "gpu-filter", "ignorable": True}
    mixed = copy.deepcopy(SPLIT)
    mixed["extenders"].append(other)
    assert problems(mixed, KEYS, gang_wait_seconds=10.0) == []
    pure = {"profiles": [{"schedulerName": "x"}], "extenders": [other]}
    assert problems(pure, KEYS, gang_wait_seconds=10.0) == []
    assert extender_entries(pure, KEYS) == []


def test_the_markers_follow_the_resource_domain() -> None:
    keys = Keys.for_domain("example.com")
    found = problems(SPLIT, keys, gang_wait_seconds=10.0)
    assert found == []  # escher.io's markers are no entry of an example.com extender
    renamed = copy.deepcopy(SPLIT)
    for e, marker in zip(renamed["extenders"], keys.markers, strict=True):
        e["managedResources"][0]["name"] = marker
    assert problems(renamed, keys, gang_wait_seconds=10.0) == []
    assert len(extender_entries(renamed, keys)) == 3


@pytest.mark.parametrize(
    ("client", "extender_qps", "flagged"),
    [
        (None, 50.0, False),  # both at their defaults
        ({"qps": 1000}, 50.0, True),  # busy clusters raise the scheduler's: binds stay at 50
        ({"qps": 1000}, 1000.0, False),
        ({"qps": 100}, 1000.0, False),
        ({"qps": 1000}, None, False),  # the extender's budget not given: not judged
    ],
)
def test_an_extender_budget_below_the_schedulers_is_said(
    client: dict[str, Any] | None, extender_qps: float | None, flagged: bool
) -> None:
    config = copy.deepcopy(SPLIT)
    if client is not None:
        config["clientConnection"] = client
    found = problems(config, KEYS, gang_wait_seconds=10.0, extender_qps=extender_qps)
    assert [p.where for p in found] == (["clientConnection.qps"] if flagged else [])
