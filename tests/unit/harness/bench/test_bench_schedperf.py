"""Unit tests of bench scheduler-perf's pure parts: the test-case and scheduler configuration it
renders, the data items it reads, the summary over repetitions, and the Kubernetes pin."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from escher_harness.bench import schedperf_config as cfg
from escher_harness.bench import schedperf_items as items
from escher_harness.bench.scheduler_perf import summarize, table
from escher_harness.localcluster.config import EXTENDER_URL_PLACEHOLDER
from escher_harness.localcluster.paths import REPO_ROOT

_POD_PLAIN = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: c\n    image: x\n"
_POD_FOO = (
    "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p-{{.Index}}\nspec:\n  containers:\n"
    "  - name: c\n    image: x\n    resources:\n      limits:\n        foo.com/bar-{{.Index}}: 1\n"
)


@pytest.fixture
def templates(tmp_path: Path) -> Path:
    (tmp_path / "templates").mkdir()
    (tmp_path / "misc" / "templates").mkdir(parents=True)
    (tmp_path / "templates" / "pod-default.yaml").write_text(_POD_PLAIN)
    (tmp_path / "misc" / "templates" / "pod-with-extended-resource.yaml").write_text(_POD_FOO)
    return tmp_path


@pytest.mark.parametrize(
    ("test_case", "nodes", "name", "init_pods", "measured", "domain"),
    [
        ("SchedulingBasic", 10, "10Nodes", 10, 300, None),
        ("SchedulingBasic", 500, "500Nodes", 500, 1000, None),
        ("SchedulingBasic", 1000, "1000Nodes", 1000, 2000, None),
        (
            "SchedulingWithExtendedResource",
            500,
            "500pods_500nodes_DRAExtendedResourceEnabled",
            0,
            500,
            "foo.com",
        ),
    ],
    ids=["basic-10", "basic-500", "basic-1000", "extended-500"],
)
def test_workload_found_by_node_count(
    templates: Path,
    test_case: str,
    nodes: int,
    name: str,
    init_pods: int,
    measured: int,
    domain: str | None,
) -> None:
    wl = cfg.workload(cfg.load_test_cases(), test_case, nodes, templates)
    assert (wl.name, wl.init_pods, wl.measured_pods, wl.domain) == (
        name,
        init_pods,
        measured,
        domain,
    )
    assert wl.ways == (cfg.WAYS if domain else ("default", "extender"))


@pytest.mark.parametrize(
    ("test_case", "nodes", "message"),
    [
        ("SchedulingBasic", 700, "no workload with 700 nodes"),
        ("NoSuchCase", 500, "no test case named NoSuchCase"),
    ],
    ids=["unknown-size", "unknown-case"],
)
def test_workload_refused(templates: Path, test_case: str, nodes: int, message: str) -> None:
    with pytest.raises(cfg.ConfigError, match=message):
        cfg.workload(cfg.load_test_cases(), test_case, nodes, templates)


def test_render_test_case_keeps_one_workload_with_absolute_paths(templates: Path) -> None:
    cases = cfg.load_test_cases()
    wl = cfg.workload(cases, "SchedulingWithExtendedResource", 500, templates)
    [case] = cfg.render_test_case(
        cases, wl, templates=templates, scheduler_config_path=Path("/x/sched.yaml")
    )
    assert [w["name"] for w in case["workloads"]] == [wl.name]
    assert case["schedulerConfigPath"] == "/x/sched.yaml"
    paths = [op[k] for op in case["workloadTemplate"] for k in op if k.endswith("TemplatePath")]
    assert paths and all(p.startswith(str(templates) + "/") for p in paths)
    # The file it was rendered from is left as it was.
    original = next(c for c in cases if c["name"] == wl.test_case)
    assert len(original["workloads"]) > 1


@pytest.mark.parametrize(
    ("way", "extenders", "url"),
    [("default", 0, None), ("extender", 2, "http://127.0.0.1:1"), ("pure", 0, None)],
    ids=["default", "extender", "pure"],
)
def test_render_scheduler_config(way: cfg.Way, extenders: int, url: str | None) -> None:
    config = cfg.render_scheduler_config(way, extender_url=url)
    assert config["percentageOfNodesToScore"] == 100
    assert "clientConnection" not in config and "leaderElection" not in config
    got = config.get("extenders") or []
    assert len(got) == extenders
    assert all(e["urlPrefix"] == url != EXTENDER_URL_PLACEHOLDER for e in got)


def _item(metric: str, data: dict[str, float] | None, unit: str = "ms", **labels: str) -> Any:
    return {"data": data, "unit": unit, "labels": {"Metric": metric, "Name": "B/c/w", **labels}}


_GOOD = [
    _item("SchedulingThroughput", {"Average": 120.5, "Perc50": 118.0}, "pods/s"),
    _item("SchedulingDuration", {"Duration": 8.4}, "s"),
    _item(
        "scheduler_scheduling_attempt_duration_seconds",
        {"Average": 9.0, "Perc99": 40.0, "Perc95": 30.0},
        result="scheduled",
    ),
    _item(
        "scheduler_scheduling_attempt_duration_seconds", {"Average": 99.0}, result="unschedulable"
    ),
    _item(
        "scheduler_framework_extension_point_duration_seconds",
        {"Average": 2.0},
        extension_point="Filter",
    ),
    _item(
        "scheduler_framework_extension_point_duration_seconds",
        {"Average": 5.0},
        extension_point="PreFilter",
    ),
]


def _file(data_items: list[Any]) -> bytes:
    return json.dumps({"version": "v1", "dataItems": data_items}).encode()


def test_parse_data_items() -> None:
    r = items.parse(_file(_GOOD))
    assert r.name == "B/c/w"
    assert r.throughput == {"Average": 120.5, "Perc50": 118.0}
    assert r.duration_s == 8.4
    assert r.attempt_ms == {"Average": 9.0, "Perc99": 40.0}  # scheduled only, known buckets
    assert r.extension_ms == {"Filter": {"Average": 2.0}}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{", "not JSON"),
        (b'{"version": "v1"}', "not a scheduler_perf data-items file"),
        (_file([*_GOOD, _item("SchedulingDuration", {}, "s", Name="other")]), "of one workload"),
        (
            _file(
                [
                    _item(
                        "scheduler_scheduling_attempt_duration_seconds", {}, "s", result="scheduled"
                    )
                ]
            ),
            "expected 'ms'",
        ),
    ],
    ids=["not-json", "no-items", "two-workloads", "wrong-unit"],
)
def test_parse_refuses(raw: bytes, message: str) -> None:
    with pytest.raises(items.DataItemsError, match=message):
        items.parse(raw)


def test_no_throughput_sample_is_none() -> None:
    r = items.parse(_file([_item("SchedulingThroughput", None, "pods/s")]))
    assert r.throughput is None


def _run(way: str, rep: int, average: float | None) -> dict[str, Any]:
    return {
        "test_case": "SchedulingBasic",
        "workload": "500Nodes",
        "way": way,
        "repetition": rep,
        "results": {"throughput": None if average is None else {"Average": average}},
    }


@pytest.mark.parametrize(
    ("runs", "want"),
    [
        (
            [_run("default", 0, 100), _run("extender", 0, 50)],
            {"default": (100, 100, 100, 1.0), "extender": (50, 50, 50, 0.5)},
        ),
        (
            # Ratios are taken within a repetition: 40/80, 60/100, 90/90.
            [
                _run("default", 0, 80),
                _run("extender", 0, 40),
                _run("default", 1, 100),
                _run("extender", 1, 60),
                _run("default", 2, 90),
                _run("extender", 2, 90),
            ],
            {"default": (90, 80, 100, 1.0), "extender": (60, 40, 90, 0.6)},
        ),
        (
            # A run without a throughput sample counts for nothing, and has no ratio.
            [_run("default", 0, 100), _run("extender", 0, None), _run("extender", 1, 70)],
            {"default": (100, 100, 100, 1.0), "extender": (70, 70, 70, None)},
        ),
    ],
    ids=["one-repetition", "three-repetitions", "missing-sample"],
)
def test_summarize(
    runs: list[dict[str, Any]], want: dict[str, tuple[float, float, float, float | None]]
) -> None:
    got = {
        s["way"]: (
            s["pods_per_s"]["median"],
            s["pods_per_s"]["min"],
            s["pods_per_s"]["max"],
            None if s["ratio_to_default"] is None else s["ratio_to_default"]["median"],
        )
        for s in summarize(runs)
    }
    assert got == want
    assert "| SchedulingBasic/500Nodes | extender |" in table(summarize(runs))


def test_scheduler_perf_pins_the_projects_kubernetes() -> None:
    """hack/scheduler-perf builds from the release hack/kubernetes pins, staging modules too."""

    def pins(module: str) -> set[str]:
        text = (REPO_ROOT / "hack" / module / "go.mod").read_text()
        return set(re.findall(r"k8s\.io/kubernetes (v1\.\d+\.\d+)", text))

    [kubernetes] = pins("kubernetes")
    assert pins("scheduler-perf") == {kubernetes}
    text = (REPO_ROOT / "hack" / "scheduler-perf" / "go.mod").read_text()
    staging = set(re.findall(r"k8s\.io/[a-z-]+ => k8s\.io/[a-z-]+ (v\S+)", text))
    assert staging == {"v0" + kubernetes.removeprefix("v1")}
