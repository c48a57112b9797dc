"""scheduler_perf's results: the data-items file a run writes into its -data-items-dir.

The file (`BenchmarkPerfScheduling_benchmark_<topic>_<time>.json`, perf-dash's format) holds one
item per metric and label set, each {"data": {bucket: value}, "unit", "labels": {"Metric",
"Name", ...}}. Read here: SchedulingThroughput (pods/s sampled once a second while the measured
pods are scheduled; Average is what upstream's thresholds compare), SchedulingDuration (from the
start of the measured op to the last pod scheduled), the scheduling-attempt latency and the
Filter / Score / Bind extension points. Called by escher_harness.bench.schedperf_run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec

# Extension points reported: the extender's filter and prioritize calls run inside Filter and
# Score, its bind inside Bind.
EXTENSION_POINTS: Final = ("Filter", "Score", "Bind")
_BUCKETS: Final = ("Average", "Perc50", "Perc90", "Perc99")


class DataItemsError(ValueError):
    """The data-items file is missing or not what scheduler_perf writes; the message says why."""


class _Item(msgspec.Struct, frozen=True):
    data: dict[str, float] | None  # null: SchedulingThroughput without a single sample
    unit: str
    labels: dict[str, str] = {}


class _File(msgspec.Struct, frozen=True):
    version: str
    dataItems: list[_Item]


@dataclass(frozen=True)
class Results:
    """What one run measured. Latencies in ms; throughput in pods/s."""

    name: str  # scheduler_perf's Name label: BenchmarkPerfScheduling/<case>/<workload>/<ns>
    # Average, Perc50, Perc90, Perc95, Perc99; None when scheduling was over within one
    # sampling interval (scheduler_perf then records no throughput).
    throughput: Mapping[str, float] | None
    duration_s: float | None
    attempt_ms: Mapping[str, float]  # successful scheduling attempts
    extension_ms: Mapping[str, Mapping[str, float]]  # extension point -> bucket -> ms

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "throughput": dict(self.throughput) if self.throughput else None,
            "duration_s": self.duration_s,
            "attempt_ms": dict(self.attempt_ms),
            "extension_ms": {k: dict(v) for k, v in self.extension_ms.items()},
        }


def find(items_dir: Path) -> Path:
    """The one data-items file in `items_dir`."""
    files = sorted(items_dir.glob("BenchmarkPerfScheduling_*.json"))
    if len(files) != 1:
        raise DataItemsError(f"expected one data-items file in {items_dir}, found {len(files)}")
    return files[0]


def parse(raw: bytes) -> Results:
    """The results of the one workload a data-items file holds."""
    try:
        doc = msgspec.json.decode(raw, type=_File)
    except msgspec.ValidationError as e:
        raise DataItemsError(f"not a scheduler_perf data-items file: {e}") from None
    except msgspec.DecodeError as e:
        raise DataItemsError(f"data-items file is not JSON: {e}") from None
    names = {i.labels.get("Name") for i in doc.dataItems} - {None}
    if len(names) != 1:
        raise DataItemsError(f"expected the items of one workload, found {sorted(map(str, names))}")
    throughput: dict[str, float] | None = None
    duration: float | None = None
    attempt: dict[str, float] = {}
    extension: dict[str, dict[str, float]] = {}
    for item in doc.dataItems:
        metric, labels = item.labels.get("Metric"), item.labels
        data = item.data or {}
        if metric == "SchedulingThroughput" and data:
            throughput = dict(data)
        elif metric == "SchedulingDuration":
            duration = data.get("Duration")
        elif (
            metric == "scheduler_scheduling_attempt_duration_seconds"
            and labels.get("result") == "scheduled"
        ):
            attempt = _buckets(item)
        elif (
            metric == "scheduler_framework_extension_point_duration_seconds"
            and labels.get("extension_point") in EXTENSION_POINTS
        ):
            extension[labels["extension_point"]] = _buckets(item)
    return Results(
        name=str(names.pop()),
        throughput=throughput,
        duration_s=duration,
        attempt_ms=attempt,
        extension_ms=extension,
    )


def _buckets(item: _Item) -> dict[str, float]:
    if item.unit != "ms":
        raise DataItemsError(f"{item.labels.get('Metric')}: unit {item.unit!r}, expected 'ms'")
    data = item.data or {}
    return {b: data[b] for b in _BUCKETS if b in data}
