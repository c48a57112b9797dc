"""The shipped monitoring (deploy/monitoring) against the real tools and the real service:

- `promtool check rules` accepts rules.yaml, and `promtool test rules` passes tests.yaml,
  where every alert fires on its case and stays quiet on the routine ones;
- prometheusrule.yaml carries exactly rules.yaml's groups;
- every metric the rules, the dashboard and the rules' tests name is exported by a running
  `escher-extender serve --mode standalone` (its `# TYPE` families, which exist before any sample),
  and every label the tests' series carry is one the service gives that metric (or a label
  Prometheus adds when scraping). kube-scheduler's `scheduler_*` metrics and `up` are not the
  service's: they are checked to be only those two names.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from escher_harness.localcluster.binaries import find_tool
from escher_harness.localcluster.ports import allocate_ports
from extender.metrics import Metrics

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "monitoring"
NOT_THE_SERVICES = {"up", "scheduler_schedule_attempts_total"}
SCRAPE_LABELS = {"job", "instance"}  # added by Prometheus
HISTOGRAM = ("_bucket", "_count", "_sum")
# PromQL words that look like metric names: functions, aggregations, keywords.
KEYWORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "rate", "increase", "irate",
    "histogram_quantile", "max_over_time", "min_over_time", "on", "ignoring", "group_left",
    "and", "or", "unless", "label_values", "humanizePercentage",
}  # fmt: skip


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(find_tool("promtool")), *args], cwd=MONITORING, capture_output=True, text=True
    )


def test_promtool_checks_the_rules_and_passes_their_unit_tests() -> None:
    checked = promtool("check", "rules", "rules.yaml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", "tests.yaml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    alerts = {r["alert"] for g in rules()["groups"] for r in g["rules"]}
    cases = yaml.safe_load((MONITORING / "tests.yaml").read_text())["tests"]
    tested_alerts = {t["alertname"] for case in cases for t in case["alert_rule_test"]}
    assert tested_alerts == alerts  # every alert has a case


def test_the_prometheus_rule_carries_exactly_the_rule_files_groups() -> None:
    wrapped = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert wrapped["kind"] == "PrometheusRule"
    assert wrapped["spec"] == rules(), (
        "regenerate deploy/monitoring/prometheusrule.yaml: its spec is rules.yaml"
    )


def rules() -> dict[str, object]:
    return yaml.safe_load((MONITORING / "rules.yaml").read_text())  # type: ignore[no-any-return]


def expressions() -> list[str]:
    exprs = [r["expr"] for g in rules()["groups"] for r in g["rules"]]  # type: ignore[index,union-attr]
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    exprs += [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return exprs


def names_in(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not inside a label matcher
    or a string, not a keyword, not a label in by (...), not a range like [5m]."""
    expr = re.sub(r'"[^"]*"', '""', expr)  # strings
    expr = re.sub(r"\{[^}]*\}", "{}", expr)  # label matchers
    expr = re.sub(r"\b(by|without)\s*\([^)]*\)", "", expr)  # grouping labels
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    words = set(re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b", expr))
    return {w for w in words - KEYWORDS if (not w.startswith("$") and "_" in w) or w == "up"}


@pytest.fixture(scope="module")
def families() -> Iterator[dict[str, set[str]]]:
    """The service's metric families (name -> label names seen), from a real scrape."""
    port = allocate_ports({"api": None})["api"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "extender", "serve", "--mode", "standalone", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "serve did not start"
                time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(10)
    out: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            out.setdefault(line.split()[2], set())
        elif line and not line.startswith("#"):
            name, _, rest = line.partition("{")
            labels = set(re.findall(r'(\w+)="', rest.partition("}")[0])) if rest else set()
            out.setdefault(name.split()[0], set()).update(labels)
    yield out


def family_of(name: str, families: dict[str, set[str]]) -> str | None:
    if name in families:
        return name
    for suffix in HISTOGRAM:
        if name.endswith(suffix) and name.removesuffix(suffix) in families:
            return name.removesuffix(suffix)
    return None


def test_every_metric_the_rules_and_the_dashboard_name_is_exported(
    families: dict[str, set[str]],
) -> None:
    named = set().union(*(names_in(e) for e in expressions()))
    assert "escher_writeback_lag_seconds_bucket" in named  # the parser finds names
    missing = {n for n in named - NOT_THE_SERVICES if family_of(n, families) is None}
    assert not missing, f"named but not exported by the service: {sorted(missing)}"


def declared_labels() -> dict[str, set[str]]:
    """The labels each family carries, as extender.metrics declares them: a scrape shows only
    those with samples, and `serve --mode standalone` has few."""
    registry = Metrics().registry
    out: dict[str, set[str]] = {}
    for collector in registry._collector_to_names:  # prometheus_client keeps no public list
        for name in registry._collector_to_names[collector]:
            out[name] = set(getattr(collector, "_labelnames", ()))
    return out


def test_the_rules_tests_series_are_shaped_as_the_service_exports_them(
    families: dict[str, set[str]],
) -> None:
    declared = declared_labels()
    assert declared["escher_gangs"] == {"phase"}  # the declarations are read
    cases = yaml.safe_load((MONITORING / "tests.yaml").read_text())["tests"]
    for case in cases:
        for series in case["input_series"]:
            name, _, rest = series["series"].partition("{")
            labels = set(re.findall(r"(\w+)=", rest))
            if name in NOT_THE_SERVICES:
                continue
            family = family_of(name, families)
            assert family is not None, f"{name}: not exported by the service"
            allowed = declared.get(family, set()) | families[family] | SCRAPE_LABELS
            if name.endswith("_bucket"):
                allowed |= {"le"}
            assert labels <= allowed, f"{series['series']}: {sorted(labels - allowed)}"
