"""kube-scheduling-perf's workload as this benchmark runs it: the eight scenarios, the node
and pod shapes, the submission rates, and the figures the project's fork published.

Read from the fork's Makefile, test/utils (options, nodes) and test/*/batch_job.yaml
(github.com/songmingming0827/kube-scheduling-perf, 2026-08): NODES_SIZE=1000 kwok nodes of
CPU_PER_NODE=16, MEMORY_PER_NODE=64Gi and 110 pods; every pod requests (and is limited to)
CPU_REQUEST_PER_POD=1 and MEMORY_REQUEST_PER_POD=1Gi and completes 30 s after it runs
(POD_DURATION, kwok's pod-complete delay); jobs are created by one client at QPS 100, burst
200 (test/utils/init.go) and their pods by the job controllers at QPS 1000, burst 1000. With
gang, a job's minimum is all its pods. Used by run, report and the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

NODES: Final = 1000
NODE_CPU: Final = "16"
NODE_MEMORY: Final = "64Gi"
NODE_PODS: Final = 110
POD_CPU: Final = "1"
POD_MEMORY: Final = "1Gi"
POD_RUN_SECONDS: Final = 30.0
PODS: Final = 10_000
# The submitting client's budget (jobs) and the job controllers' (pods): token buckets.
JOB_QPS: Final = 100.0
JOB_BURST: Final = 200
POD_QPS: Final = 1000.0
POD_BURST: Final = 1000


@dataclass(frozen=True)
class Scenario:
    """One of the eight: `jobs` jobs of `size` pods, gang-scheduled or not."""

    number: int  # the project's scenario number, 1-8
    jobs: int
    size: int
    gang: bool

    @property
    def name(self) -> str:
        """As the CLI takes it, e.g. 500x20 or 500x20-gang (jobs x pods per job)."""
        return f"{self.jobs}x{self.size}{'-gang' if self.gang else ''}"

    @property
    def pods(self) -> int:
        return self.jobs * self.size

    def scaled(self, pods: int) -> Scenario:
        """The same scenario for `pods` pods in all: a job keeps its size where that fits
        (so 1 x 10,000 stays one job of them all), and there are fewer jobs."""
        if pods < 1:
            raise ValueError(f"pods must be at least 1, not {pods}")
        size = min(self.size, pods)
        return Scenario(self.number, max(1, pods // size), size, self.gang)


SCENARIOS: Final = tuple(
    Scenario(n, jobs, size, gang)
    for n, (jobs, size, gang) in enumerate(
        [
            (10_000, 1, False),
            (500, 20, False),
            (20, 500, False),
            (1, 10_000, False),
            (10_000, 1, True),
            (500, 20, True),
            (20, 500, True),
            (1, 10_000, True),
        ],
        start=1,
    )
)
BY_NAME: Final = {s.name: s for s in SCENARIOS}


def chosen(names: list[str] | None) -> tuple[Scenario, ...]:
    """The scenarios named (default all eight, in the project's order); ValueError for a
    name not among them."""
    if not names:
        return SCENARIOS
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(f"unknown scenario {unknown[0]!r}; choose from {', '.join(BY_NAME)}")
    return tuple(BY_NAME[n] for n in names)


@dataclass(frozen=True)
class Published:
    """A figure of theirs: seconds from the first pod created to the last scheduled."""

    scheduler: str
    seconds: float | None  # None: not reached on their chart
    note: str


# The fork's perf-analysis-report.md (text: Volcano's totals) and its results/scenario-N/
# job-submission.png (read off the plots to about a second: Kueue and YuniKorn), measured on
# 16 cores with Kubernetes 1.34.8 on kind (Volcano 1.15.1, Kueue 0.19.0 with Coscheduling
# 0.34.7 for gangs and kube-scheduler without, YuniKorn 1.9.0).
THEIR_MACHINE: Final = "16 cores, >= 32 GiB, Kubernetes 1.34.8 on kind + kwok 0.7.0"
PUBLISHED: Final[dict[int, tuple[Published, ...]]] = {
    1: (Published("Volcano", 100.0, "report text; submission-bound (jobs at QPS 100)"),),
    2: (Published("Volcano", 22.0, "report text; p50 3.48 s, p99 14.65 s"),),
    3: (Published("Volcano", 20.0, "report text; p50 5.32 s, p99 11.88 s"),),
    4: (Published("Volcano", 18.0, "report text"),),
    5: (Published("Volcano", 100.0, "report text; submission-bound"),),
    6: (
        Published("Volcano", 20.5, "report text ~20 s; plot"),
        Published("Kueue + Coscheduling", 50.0, "plot"),
        Published("YuniKorn", None, "5,800 of 10,000 at the chart's end, 55 s"),
    ),
    7: (
        Published("Volcano", 27.0, "report text ~30 s; plot"),
        Published("Kueue + Coscheduling", 36.0, "plot"),
        Published("YuniKorn", None, "3,500 of 10,000 at the chart's end, 41 s"),
    ),
    8: (
        Published("Volcano", 43.0, "report text ~45 s; plot"),
        Published("Kueue + Coscheduling", 54.0, "plot"),
        Published("YuniKorn", None, "off the chart (over 59 s)"),
    ),
}
