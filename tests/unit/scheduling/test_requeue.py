"""Requeue (extender.scheduling.requeue): a pod the filter turned away from every node for want
of an ephemeral resource is woken, once, when a holding of that resource is released within the
window; not for another resource, not after the window, not once bound or gone; bounded by
count. (That the filter notes exactly the pods it turns away everywhere: test_verbs.)"""

from __future__ import annotations

import pytest
from builders import Clock

from extender.core.events import PodChange, PodEvent
from extender.core.pod import PodInfo
from extender.scheduling.requeue import Requeue

R, S = "escher.io/r", "escher.io/s"


def info(uid: str, wants: dict[str, int], node: str = "") -> PodInfo:
    return PodInfo(
        uid,
        "default",
        f"p-{uid}",
        dict(wants),
        dict(wants),
        {},
        "",
        0,
        node,
        False,
        False,
        False,
        None,
    )


def setup(window: float = 5.0, max_pods: int = 100) -> tuple[Requeue, Clock, list[str]]:
    clock, woken = Clock(0.0), []
    requeue = Requeue(lambda uid, ns, name: woken.append(f"{ns}/{name}"), window, max_pods, clock)
    return requeue, clock, woken


@pytest.mark.parametrize(
    ("wants", "after", "freed", "woken"),
    [
        ({R: 1}, 0.1, {R: 1}, ["default/p-a"]),
        ({R: 1, S: 1}, 4.9, {S: 2}, ["default/p-a"]),  # any one of its resources
        ({R: 1}, 0.1, {S: 1}, []),  # another resource freed
        ({R: 1}, 5.1, {R: 1}, []),  # after the window: kube-scheduler saw the release itself
        ({}, 0.1, {R: 1}, []),  # no ephemeral request: never noted
    ],
    ids=["same", "one-of-its", "other-resource", "after-window", "plain-pod"],
)
def test_a_release_wakes_the_pods_turned_away_for_it(
    wants: dict[str, int], after: float, freed: dict[str, int], woken: list[str]
) -> None:
    requeue, clock, seen = setup()
    requeue.turned_away(info("a", wants))
    clock.now += after
    requeue.on_pod(PodEvent(PodChange.GONE, "holder", None, freed))
    assert seen == woken
    # Each note wakes once.
    requeue.on_pod(PodEvent(PodChange.GONE, "holder-2", None, freed))
    assert seen == woken and requeue.woken == len(woken)


@pytest.mark.parametrize(
    "event",
    [
        PodEvent(PodChange.UPSERT, "a", info("a", {R: 1}, node="n0")),  # bound
        PodEvent(PodChange.GONE, "a", None),  # deleted
    ],
    ids=["bound", "gone"],
)
def test_a_pod_bound_or_gone_is_forgotten(event: PodEvent) -> None:
    requeue, _, seen = setup()
    requeue.turned_away(info("a", {R: 1}))
    requeue.on_pod(event)
    requeue.on_pod(PodEvent(PodChange.GONE, "holder", None, {R: 1}))
    assert seen == [] and len(requeue) == 0


def test_notes_are_bounded_oldest_first() -> None:
    requeue, clock, seen = setup(max_pods=3)
    for i in range(5):
        requeue.turned_away(info(f"p{i}", {R: 1}))
        clock.now += 0.01
    assert len(requeue) == 3
    requeue.released({R: 1})
    assert seen == ["default/p-p2", "default/p-p3", "default/p-p4"]
