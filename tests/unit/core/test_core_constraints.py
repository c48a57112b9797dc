"""Where a pod may run as the extender sees it: node selector, required node affinity,
taints and tolerations, unschedulable nodes, and what only kube-scheduler can evaluate.
Cases follow k8s.io/component-helpers' nodeaffinity and taint tests."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
import pytest

from extender.core.constraints import constraints_of
from extender.core.ledger import NodeView
from extender.core.objects import PodSpec, Taint

NODE = NodeView(
    "node-1",
    labels={"zone": "a", "gpu": "yes", "rank": "7"},
    taints=(Taint(key="dedicated", value="ml", effect="NoSchedule"),),
)

T = TypeVar("T")


def _decode(obj: Any, kind: type[T]) -> T:
    """As the wire does it: from JSON (msgspec.Raw fields come only from JSON)."""
    return msgspec.json.decode(msgspec.json.encode(obj), type=kind)


def spec(**fields: Any) -> PodSpec:
    base = {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}
    return _decode({**base, **fields}, PodSpec)


def term(*expressions: dict[str, Any], fields: list[dict[str, Any]] | None = None) -> Any:
    t: dict[str, Any] = {"matchExpressions": list(expressions)}
    if fields is not None:
        t["matchFields"] = fields
    return t


def affinity(*terms: Any) -> dict[str, Any]:
    required = {"nodeSelectorTerms": list(terms)}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}


def req(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


@pytest.mark.parametrize(
    ("fields", "allowed"),
    [
        pytest.param({}, True, id="no-constraint"),
        pytest.param({"nodeSelector": {"zone": "a"}}, True, id="selector-match"),
        pytest.param({"nodeSelector": {"zone": "b"}}, False, id="selector-mismatch"),
        pytest.param({"affinity": affinity(term(req("zone", "In", "a", "b")))}, True, id="In"),
        pytest.param({"affinity": affinity(term(req("zone", "NotIn", "a")))}, False, id="NotIn"),
        pytest.param({"affinity": affinity(term(req("x", "NotIn", "a")))}, True, id="NotIn-absent"),
        pytest.param({"affinity": affinity(term(req("gpu", "Exists")))}, True, id="Exists"),
        pytest.param({"affinity": affinity(term(req("gpu", "DoesNotExist")))}, False, id="DNE"),
        pytest.param({"affinity": affinity(term(req("rank", "Gt", "5")))}, True, id="Gt"),
        pytest.param({"affinity": affinity(term(req("rank", "Lt", "5")))}, False, id="Lt"),
        pytest.param({"affinity": affinity(term(req("zone", "Gt", "5")))}, False, id="Gt-nonint"),
        pytest.param({"affinity": affinity(term(req("zone", "Bogus", "a")))}, False, id="bad-op"),
        # Terms are ORed, requirements within a term ANDed.
        pytest.param(
            {"affinity": affinity(term(req("zone", "In", "b")), term(req("gpu", "Exists")))},
            True,
            id="terms-or",
        ),
        pytest.param(
            {"affinity": affinity(term(req("zone", "In", "a"), req("gpu", "DoesNotExist")))},
            False,
            id="requirements-and",
        ),
        # A term with no requirement selects no node.
        pytest.param({"affinity": affinity(term())}, False, id="empty-term"),
        pytest.param(
            {"affinity": affinity(term(fields=[req("metadata.name", "In", "node-1")]))},
            True,
            id="matchFields-name",
        ),
        pytest.param(
            {"affinity": affinity(term(fields=[req("metadata.name", "NotIn", "node-1")]))},
            False,
            id="matchFields-NotIn",
        ),
        pytest.param(
            {"affinity": affinity(term(fields=[req("metadata.uid", "In", "node-1")]))},
            False,
            id="matchFields-other-field",
        ),
        # Both the node selector and the affinity must hold.
        pytest.param(
            {"nodeSelector": {"zone": "b"}, "affinity": affinity(term(req("gpu", "Exists")))},
            False,
            id="selector-and-affinity",
        ),
    ],
)
def test_node_affinity(fields: dict[str, Any], allowed: bool) -> None:
    assert (constraints_of(spec(**fields)).check(NODE) == "") is allowed


@pytest.mark.parametrize(
    ("tolerations", "taint", "allowed"),
    [
        pytest.param([], Taint(key="k", value="v", effect="NoSchedule"), False, id="untolerated"),
        pytest.param([], Taint(key="k", effect="PreferNoSchedule"), True, id="prefer-only"),
        pytest.param(
            [{"key": "k", "operator": "Equal", "value": "v"}],
            Taint(key="k", value="v", effect="NoSchedule"),
            True,
            id="equal",
        ),
        pytest.param(
            [{"key": "k", "value": "w"}],
            Taint(key="k", value="v", effect="NoExecute"),
            False,
            id="equal-other-value",
        ),
        pytest.param(
            [{"operator": "Exists"}], Taint(key="any", effect="NoExecute"), True, id="wildcard"
        ),
        pytest.param(
            [{"key": "k", "operator": "Exists", "effect": "NoExecute"}],
            Taint(key="k", effect="NoSchedule"),
            False,
            id="other-effect",
        ),
    ],
)
def test_taints_and_tolerations(
    tolerations: list[dict[str, str]], taint: Taint, allowed: bool
) -> None:
    c = constraints_of(_decode({"tolerations": tolerations}, PodSpec))
    assert (c.check(NodeView("n", taints=(taint,))) == "") is allowed


def test_unschedulable_nodes_need_the_toleration() -> None:
    node = NodeView("n", unschedulable=True)
    assert constraints_of(PodSpec()).check(node) == "node(s) were unschedulable"
    tolerant = _decode(
        {"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]},
        PodSpec,
    )
    assert constraints_of(tolerant).check(node) == ""


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({}, ""),
        ({"affinity": {"podAntiAffinity": {"x": 1}}}, "pod affinity"),
        ({"affinity": {"podAffinity": None}}, ""),
        ({"topologySpreadConstraints": [{"maxSkew": 1}]}, "topology spread constraints"),
        ({"containers": [{"ports": [{"containerPort": 80, "hostPort": 80}]}]}, "host ports"),
        ({"containers": [{"ports": [{"containerPort": 80}]}]}, ""),
        ({"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}]}, "volumes"),
        ({"volumes": [{"name": "v", "configMap": {"name": "c"}}]}, ""),
        ({"resourceClaims": [{"name": "gpu"}]}, "resource claims"),
    ],
)
def test_what_only_kube_scheduler_can_evaluate(fields: dict[str, Any], why: str) -> None:
    unevaluable = constraints_of(_decode(fields, PodSpec)).unevaluable
    assert (why in unevaluable) if why else unevaluable == ""
