"""Filter, prioritize and bind decisions over the ledger (no HTTP, a fake Binder)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from extender.filters.ephemeral import EphemeralResourceFit
from extender.ledger import HolderKind, Ledger
from extender.verbs import BadRequest, Verbs
from extender.wire import ExtenderArgs, ExtenderBindingArgs, ExtenderBindingResult, NodeList

R = "escher.io/r"


def pod(uid: str = "u1", r: str | None = None, cpu: str | None = None) -> dict[str, Any]:
    lim = {k: v for k, v in ((R, r), ("cpu", cpu)) if v is not None}
    return {
        "metadata": {"name": f"p-{uid}", "namespace": "ns", "uid": uid},
        "spec": {"containers": [{"name": "c", "resources": {"limits": lim}}]},
    }


class FakeBinder:
    def __init__(self, fail: Exception | None = None) -> None:
        self.fail = fail
        self.bound: list[tuple[str, str, str, str]] = []
        self.pods: dict[tuple[str, str], Mapping[str, Any]] = {}

    def get_pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        return self.pods[(namespace, name)]

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        if self.fail:
            raise self.fail
        self.bound.append((namespace, name, uid, node))


def verbs(binder: FakeBinder | None = None, caps: Mapping[str, int] | None = None) -> Verbs:
    lg = Ledger("escher.io")
    for n in ("a", "b", "c"):
        lg.upsert_node(n, {}, {"cpu": 1000})
    if caps:
        lg.set_capacity(R, caps)
    plugin = EphemeralResourceFit()
    return Verbs(lg, "escher.io", [plugin], [plugin], binder)


def test_filter_passes_pods_without_ephemeral_requests_untouched() -> None:
    v = verbs()
    r = v.filter(ExtenderArgs(Pod=pod(cpu="1"), NodeNames=["a", "b"]))
    assert r.NodeNames == ["a", "b"] and not r.FailedNodes and not r.FailedAndUnresolvableNodes


@pytest.mark.parametrize(
    ("caps", "held", "want", "passed", "soft", "hard"),
    [
        ({"a": 2, "b": 1}, {}, "1", ["a", "b"], [], ["c"]),
        ({"a": 2, "b": 1}, {"b": 1}, "1", ["a"], ["b"], ["c"]),
        ({"a": 2, "b": 1}, {}, "2", ["a"], [], ["b", "c"]),
        ({"a": 1}, {"a": 1}, "1", [], ["a"], ["b", "c"]),
    ],
)
def test_filter_node_names(
    caps: dict[str, int],
    held: dict[str, int],
    want: str,
    passed: list[str],
    soft: list[str],
    hard: list[str],
) -> None:
    v = verbs(caps=caps)
    for node, k in held.items():
        assert v.ledger.hold(f"other-{node}", node, {R: k}) is None
    r = v.filter(ExtenderArgs(Pod=pod(r=want), NodeNames=["a", "b", "c"]))
    assert r.NodeNames == passed
    assert sorted(r.FailedNodes) == soft
    assert sorted(r.FailedAndUnresolvableNodes) == hard
    assert r.Nodes is None


def test_filter_node_list_echoes_passing_node_objects() -> None:
    v = verbs(caps={"b": 1})
    items = [{"metadata": {"name": n}, "status": {"x": n}} for n in ("a", "b")]
    r = v.filter(ExtenderArgs(Pod=pod(r="1"), Nodes=NodeList(kind="NodeList", items=items)))
    assert r.NodeNames is None
    assert r.Nodes is not None and r.Nodes.items == [items[1]] and r.Nodes.kind == "NodeList"
    assert r.FailedAndUnresolvableNodes == {"a": "node(s) lack escher.io/r"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (ExtenderArgs(Pod=pod()), "neither Nodes nor NodeNames"),
        (ExtenderArgs(Pod={"spec": {}}, NodeNames=["a"]), "Pod.metadata"),
        (ExtenderArgs(Pod=pod(cpu="x"), NodeNames=["a"]), "cpu: invalid quantity"),
        (
            ExtenderArgs(Pod=pod(), Nodes=NodeList(items=[{"metadata": {}}])),
            r"Nodes.items\[0\].metadata.name",
        ),
    ],
)
def test_filter_bad_requests(args: ExtenderArgs, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        verbs().filter(args)


def test_prioritize_scores_in_range_and_prefers_free_nodes() -> None:
    v = verbs(caps={"a": 10, "b": 10})
    v.ledger.hold("x", "a", {R: 8})
    scores = v.prioritize(ExtenderArgs(Pod=pod(r="1"), NodeNames=["a", "b", "c"]))
    assert scores == {"a": 1, "b": 9, "c": 0}
    assert v.prioritize(ExtenderArgs(Pod=pod(), NodeNames=["a", "b"])) == {"a": 0, "b": 0}


class Loud:
    """A misbehaving scorer: scores outside 0..10 must be clamped, never passed on."""

    name = "Loud"

    def score(self, pod: object, nodes: list[str], ledger: Ledger) -> dict[str, int]:
        return {nodes[0]: 99, nodes[1]: -5}


@pytest.mark.parametrize("extra", [0, 1])
def test_prioritize_clamps_scores(extra: int) -> None:
    v = verbs(caps={"a": 10, "b": 10})
    v.scorers = [Loud()] + [EphemeralResourceFit()] * extra  # type: ignore[list-item]
    scores = v.prioritize(ExtenderArgs(Pod=pod(r="1"), NodeNames=["a", "b"]))
    assert all(0 <= s <= 10 for s in scores.values()), scores


def bind(v: Verbs, args: ExtenderBindingArgs) -> ExtenderBindingResult:
    return asyncio.run(v.bind(args))


def bind_args(uid: str = "u1", node: str = "a") -> ExtenderBindingArgs:
    return ExtenderBindingArgs(PodName=f"p-{uid}", PodNamespace="ns", PodUID=uid, Node=node)


def test_bind_holds_then_binds() -> None:
    b = FakeBinder()
    v = verbs(b, caps={"a": 1})
    v.filter(ExtenderArgs(Pod=pod("u1", r="1"), NodeNames=["a"]))
    assert bind(v, bind_args("u1")).Error == ""
    assert b.bound == [("ns", "p-u1", "u1", "a")]
    assert v.ledger.holding("u1").kind is HolderKind.ASSUMED  # type: ignore[union-attr]


def test_bind_race_refuses_the_second_pod() -> None:
    # Both pods were told "a fits" before either bind arrived (bind is asynchronous).
    b = FakeBinder()
    v = verbs(b, caps={"a": 1})
    for uid in ("u1", "u2"):
        r = v.filter(ExtenderArgs(Pod=pod(uid, r="1"), NodeNames=["a"]))
        assert r.NodeNames == ["a"]
    assert bind(v, bind_args("u1")).Error == ""
    err = bind(v, bind_args("u2")).Error
    assert err == "pod ns/p-u2 no longer fits: a: escher.io/r requested 1, available 0 of 1"
    assert len(b.bound) == 1
    assert v.ledger.node("a").used[R] == 1  # type: ignore[union-attr]


def test_bind_failure_releases_the_place() -> None:
    b = FakeBinder(fail=RuntimeError("pod ns/p-u1 is gone"))
    v = verbs(b, caps={"a": 1})
    v.filter(ExtenderArgs(Pod=pod("u1", r="1"), NodeNames=["a"]))
    assert bind(v, bind_args("u1")).Error == "pod ns/p-u1 is gone"
    assert v.ledger.holding("u1") is None
    assert v.ledger.node("a").used == {}  # type: ignore[union-attr]


def test_bind_reads_pods_it_did_not_filter() -> None:
    b = FakeBinder()
    b.pods[("ns", "p-u9")] = pod("u9", r="1")
    v = verbs(b, caps={"a": 1})
    assert bind(v, bind_args("u9")).Error == ""
    assert v.ledger.node("a").used[R] == 1  # type: ignore[union-attr]
    assert "cannot read pod ns/p-zz" in bind(v, bind_args("zz")).Error


def test_bind_disabled_without_binder() -> None:
    assert "disabled" in bind(verbs(None), bind_args()).Error
