"""What one scheduler_perf run is given: its test-case file and its KubeSchedulerConfiguration.

Pure rendering, no processes: escher_harness.bench.schedperf_run writes the results into the
run's directory. The test cases come from hack/scheduler-perf/performance-config.yaml (derived
from upstream's misc/performance-config.yaml); a run keeps one test case and one workload of
it, with the template paths made absolute and schedulerConfigPath pointing at the way's
configuration.

The three ways, all with percentageOfNodesToScore 100 (the extender needs every feasible node
for correctness; the same setting everywhere keeps the comparison fair):
- default: kube-scheduler's default profile, as upstream runs these workloads.
- extender: the project's extender mode, scheduler-config/extender.yaml (filter, prioritize and
  bind through the ESCHER extender, nodeCacheCapable, weight 1, not ignorable). The extender
  keeps its default domain (escher.io): the measured pods' foo.com/bar-i are plain extended
  resources NodeResourcesFit checks, and every pod goes through the extender's filter,
  prioritize and bind. (Owning foo.com, the extender would write the nodes' foo.com capacity
  back to what its ledger declares, nothing, and no pod would fit: the template writes the
  resources, not the extender.)
- pure: ESCHER's own construction, scheduler-config/pure.yaml: kube-scheduler alone matches the
  extended resources written on the nodes; the ESCHER service runs beside it in pure mode
  (watching the cluster, its default domain as above) but is not in the scheduling path. Its
  scheduling path is the default one, so for a workload without extended resources
  (SchedulingBasic) pure coincides with default and is not run.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import yaml

from escher_harness.localcluster.config import Mode, mode_config, point_extenders
from escher_harness.localcluster.paths import REPO_ROOT

Way = Literal["default", "extender", "pure"]
WAYS: Final[tuple[Way, ...]] = ("default", "extender", "pure")
# The local control plane's mode whose scheduler-config/ template each way uses.
_MODE: Final[Mapping[Way, Mode]] = {"default": "none", "extender": "extender", "pure": "pure"}

PERCENTAGE_OF_NODES_TO_SCORE: Final = 100
TEST_CASES_FILE: Final = REPO_ROOT / "hack" / "scheduler-perf" / "performance-config.yaml"

# Each test case's node-count parameters, and upstream's workload whose threshold (at 5,000
# nodes) is printed beside the results.
_NODE_PARAMS: Final[Mapping[str, tuple[str, ...]]] = {
    "SchedulingBasic": ("initNodes",),
    "SchedulingWithExtendedResource": ("nodesWithExtendedResource", "nodesWithoutExtendedResource"),
}
UPSTREAM_WORKLOAD: Final[Mapping[str, str]] = {
    "SchedulingBasic": "5000Nodes_10000Pods",
    "SchedulingWithExtendedResource": "5000pods_5000nodes_DRAExtendedResourceEnabled",
}
TEST_CASE_NAMES: Final = tuple(_NODE_PARAMS)


class ConfigError(ValueError):
    """The test-case file does not hold what a run needs; the message says what."""


@dataclass(frozen=True)
class Workload:
    """One workload of one test case, as the bench runs it."""

    test_case: str
    name: str
    nodes: int
    init_pods: int
    measured_pods: int
    # The extended-resource domain the measured pods request, if any: the extender owns it.
    domain: str | None

    @property
    def ways(self) -> tuple[Way, ...]:
        """The ways that differ for this workload: pure only where there is a resource."""
        return WAYS if self.domain else ("default", "extender")

    @property
    def label(self) -> str:
        return f"{self.test_case}/{self.name}"


def load_test_cases(path: Path = TEST_CASES_FILE) -> list[dict[str, Any]]:
    """A scheduler_perf test-case file (a YAML list of test cases)."""
    cases = yaml.safe_load(path.read_text())
    if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
        raise ConfigError(f"{path} is not a list of test cases")
    return cases


def workload(
    cases: Sequence[Mapping[str, Any]], test_case: str, nodes: int, templates: Path
) -> Workload:
    """The workload of `test_case` with `nodes` nodes; `templates` is where the test case's
    relative template paths point (to read which resources the measured pods request)."""
    case = _test_case(cases, test_case)
    params_of = _NODE_PARAMS.get(test_case)
    if params_of is None:
        raise ConfigError(f"no node-count parameters known for test case {test_case}")
    sizes = []
    for w in case.get("workloads") or []:
        params = w.get("params") or {}
        count = sum(int(params.get(p, 0)) for p in params_of)
        sizes.append(count)
        if count == nodes:
            return Workload(
                test_case=test_case,
                name=w["name"],
                nodes=nodes,
                init_pods=int(params.get("initPods", 0)),
                measured_pods=int(params["measurePods"]),
                domain=_measured_domain(case, templates),
            )
    raise ConfigError(f"{test_case} has no workload with {nodes} nodes (it has {sorted(sizes)})")


def render_test_case(
    cases: Sequence[Mapping[str, Any]],
    wl: Workload,
    *,
    templates: Path,
    scheduler_config_path: Path,
) -> list[dict[str, Any]]:
    """The test-case file of one run: `wl`'s test case with `wl` as its only workload, every
    template path made absolute under `templates`, and schedulerConfigPath set."""
    case = copy.deepcopy(dict(_test_case(cases, wl.test_case)))
    case["workloads"] = [w for w in case.get("workloads") or [] if w.get("name") == wl.name]
    case["schedulerConfigPath"] = str(scheduler_config_path)
    _absolute_templates(case, templates)
    for op in case.get("workloadTemplate") or []:
        _absolute_templates(op, templates)
    return [case]


# scheduler_perf's in-process scheduler client runs at QPS = burst = 5000; the extender's own
# client gets the same budget, or its binds measure a rate limit.
SCHEDULER_CLIENT_QPS = 5000


def render_scheduler_config(way: Way, *, extender_url: str | None) -> dict[str, Any]:
    """The way's KubeSchedulerConfiguration, from the project's scheduler-config/ templates."""
    config = mode_config(_MODE[way])
    if extender_url is not None:
        point_extenders(config, extender_url)
    # scheduler_perf builds the scheduler's client itself (in-process, QPS = burst = 5000) and
    # runs one scheduler: the templates' clientConnection and leaderElection would only mislead.
    config.pop("clientConnection", None)
    config.pop("leaderElection", None)
    config["percentageOfNodesToScore"] = PERCENTAGE_OF_NODES_TO_SCORE
    return config


def upstream_threshold(upstream: Sequence[Mapping[str, Any]], test_case: str) -> float | None:
    """Upstream's threshold (pods/s, SchedulingThroughput Average at 5,000 nodes) for the test
    case, from its own performance-config.yaml; None if it has none."""
    name = UPSTREAM_WORKLOAD.get(test_case)
    for w in _test_case(upstream, test_case).get("workloads") or []:
        if w.get("name") == name and w.get("threshold") is not None:
            return float(w["threshold"])
    return None


def _test_case(cases: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any]:
    for case in cases:
        if case.get("name") == name:
            return case
    raise ConfigError(f"no test case named {name}")


def _absolute_templates(obj: dict[str, Any], templates: Path) -> None:
    for key, value in obj.items():
        if key.endswith("TemplatePath") and isinstance(value, str):
            obj[key] = str(templates / value)


def _measured_domain(case: Mapping[str, Any], templates: Path) -> str | None:
    """The domain of the extended resources the measured pods request (their template's
    limits), or None when they request only cpu and memory."""
    measured = [op for op in case.get("workloadTemplate") or [] if op.get("collectMetrics")]
    if not measured:
        raise ConfigError(f"{case.get('name')}: no op collects metrics")
    path = measured[0].get("podTemplatePath") or case.get("defaultPodTemplatePath")
    if not path:
        raise ConfigError(f"{case.get('name')}: the measured pods have no template")
    # The template is Go-templated ({{.Index}}) inside names only, so it is still YAML.
    pod = yaml.safe_load((templates / path).read_text())
    domains = {
        name.split("/", 1)[0]
        for container in pod["spec"]["containers"]
        for name in ((container.get("resources") or {}).get("limits") or {})
        if "/" in name
    }
    if len(domains) > 1:
        raise ConfigError(f"{path}: pods request resources of several domains {sorted(domains)}")
    return domains.pop() if domains else None
