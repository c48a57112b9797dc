"""Where the local control plane's processes run (escher_harness.localcluster.cpus): which
half each component gets, how the CPUs are halved, and that the thread starting a process
gets its own CPUs back; and the extender's CPU share (ClusterSpec.extender_nice) only as a
nice value. That a started process runs where it was put, at its share, is
tests/process/test_process_localcluster_processes.py's; a whole cluster split and shared,
tests/e2e/test_localcluster.py's."""

from __future__ import annotations

import os
from typing import Any

import pytest

from escher_harness.localcluster import ClusterError, ClusterSpec
from escher_harness.localcluster.cpus import CpuSplit, starting_on

SPLIT = CpuSplit(scheduling=frozenset({2, 3}), rest=frozenset({0, 1}))
ALONE = CpuSplit(scheduling=frozenset({2, 3}), rest=frozenset({0, 1}), side="extender")


@pytest.mark.parametrize(
    ("component", "side", "alone"),
    [
        ("kube-scheduler", "scheduling", "rest"),
        ("extender", "scheduling", "scheduling"),
        ("extender-0", "scheduling", "scheduling"),
        ("extender-12", "scheduling", "scheduling"),
        ("etcd", "rest", "rest"),
        ("kube-apiserver", "rest", "rest"),
        ("kwok", "rest", "rest"),
        ("kube-controller-manager", "rest", "rest"),
        ("extender-proxy", "rest", "rest"),
        ("kube-scheduler-2", "rest", "rest"),
    ],
)
def test_the_split_side_gets_its_half(component: str, side: str, alone: str) -> None:
    """The scheduling side: kube-scheduler and the extender; the extender side: the extender
    (and its replicas) alone."""
    assert SPLIT.of(component) == getattr(SPLIT, side)
    assert ALONE.of(component) == getattr(ALONE, alone)


@pytest.mark.parametrize(
    ("allowed", "scheduling", "rest"),
    [
        ({0, 1}, {1}, {0}),
        ({0, 1, 2, 3}, {2, 3}, {0, 1}),
        ({0, 1, 2}, {1, 2}, {0}),
        ({4, 7}, {7}, {4}),
    ],
)
def test_the_cpus_this_process_may_use_are_halved(
    monkeypatch: pytest.MonkeyPatch, allowed: set[int], scheduling: set[int], rest: set[int]
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: allowed)
    assert CpuSplit.halves() == CpuSplit(frozenset(scheduling), frozenset(rest))
    alone = CpuSplit(frozenset(scheduling), frozenset(rest), side="extender")
    assert CpuSplit.halves("extender") == alone


def test_one_cpu_cannot_be_split(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    with pytest.raises(ClusterError, match="needs 2 CPUs or more; this process may use 1"):
        CpuSplit.halves()


def test_the_starting_thread_gets_its_own_cpus_back() -> None:
    before = os.sched_getaffinity(0)
    one = frozenset({min(before)})
    with starting_on(one):
        assert os.sched_getaffinity(0) == one
    assert os.sched_getaffinity(0) == before
    with pytest.raises(RuntimeError), starting_on(one):
        raise RuntimeError("the start failed")
    assert os.sched_getaffinity(0) == before
    with starting_on(None):
        assert os.sched_getaffinity(0) == before


@pytest.mark.parametrize("nice", [-21, 20, 100])
def test_an_extender_share_that_is_not_a_nice_value_is_refused(tmp_path: Any, nice: int) -> None:
    with pytest.raises(ClusterError, match=f"extender_nice must be in -20..19, not {nice}"):
        ClusterSpec(dir=tmp_path, extender_nice=nice)
    assert ClusterSpec(dir=tmp_path, extender_nice=-20).extender_nice == -20
