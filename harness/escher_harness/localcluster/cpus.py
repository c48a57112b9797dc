"""Where a cluster's processes run: the scheduling side on CPUs of its own (ClusterSpec.cpu_split).

On this one machine every component competes for the same cores. An approach that
schedules a gang's members while they are still being created (the extender) overlaps that
work with the API server's, which buys nothing when both share every core; a real control
plane gives kube-scheduler CPU the API server does not use (docs/gangs.md, the `scale`
preset). A split pins kube-scheduler and the extender (its replicas too) to one half of the
CPUs this process may use, and everything else (etcd, kube-apiserver, kwok,
kube-controller-manager, the service proxy) and the benchmark's load generator to the other.
The `extender` side puts the extender alone on its half (kube-scheduler joins the rest), as a
deployment that gives it a core of its own would: what its stalls are when no other process
competes for its CPU.

Used by cluster.up, which starts each process on its half (processes.spawn; a restart keeps
it), and by the benchmarks, which start their load generator on the other half. Pure Linux
affinity (sched_setaffinity): a child inherits the CPUs of the thread that starts it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, get_args

from escher_harness.localcluster.config import is_replica
from escher_harness.localcluster.errors import ClusterError

# Which components the split's own half runs (and the extender's replicas, extender-<i>):
# the ones that decide placements, or the extender alone.
Side = Literal["scheduling", "extender"]
SIDES: tuple[Side, ...] = get_args(Side)
_ON_THE_HALF: dict[Side, frozenset[str]] = {
    "scheduling": frozenset({"kube-scheduler", "extender"}),
    "extender": frozenset({"extender"}),
}


@dataclass(frozen=True)
class CpuSplit:
    scheduling: frozenset[int]
    rest: frozenset[int]
    side: Side = "scheduling"  # which components `scheduling`'s CPUs run

    @classmethod
    def halves(cls, side: Side = "scheduling") -> CpuSplit:
        """The CPUs this process may use, the upper half for `side` (CPU 1 of 2)."""
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            raise ClusterError(
                f"a CPU split needs 2 CPUs or more; this process may use {len(cpus)}"
            )
        half = len(cpus) // 2
        return cls(scheduling=frozenset(cpus[half:]), rest=frozenset(cpus[:half]), side=side)

    def of(self, component: str) -> frozenset[int]:
        own = component in _ON_THE_HALF[self.side] or is_replica(component)
        return self.scheduling if own else self.rest


@contextmanager
def starting_on(cpus: frozenset[int] | None) -> Iterator[None]:
    """Within it, the calling thread runs on `cpus` (None: as it is), so that a process it
    starts inherits them; the thread's own CPUs are given back after."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
