"""The verbs over a real ledger and gang manager: the filter's fast path gives exactly the
full path's answers, prioritize weighs its scorers, ranks preferred nodes first and stays
neutral when it has nothing to say, bind binds only what was filtered (and holds first),
preempt picks victims that free what is needed."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import builders
import msgspec
import pytest
from builders import Clock

from extender.core.ledger import HolderKind, Ledger
from extender.core.objects import Pod
from extender.core.plugins import Weighted
from extender.core.pod import Keys, PodInfo, Rejection
from extender.filters import ephemeral, preference
from extender.gang.args import GangArgs
from extender.gang.manager import GangManager
from extender.gang.planning import DEFAULT_OFFLOAD, Offload
from extender.gang.turns import Turns
from extender.scheduling import registry
from extender.scheduling.requeue import Requeue
from extender.scheduling.verbs import BindError, FilteredPods, Verbs, _filter_reply, weighted_scores
from extender.wire import (
    MAX_SCORE,
    BadRequest,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
    HostPriority,
    MetaPod,
    MetaVictims,
    node_names,
)

KEYS = Keys.for_domain("escher.io")
NODES = ["n0", "n1", "n2", "n3"]
R = "escher.io/r"


class Binder:
    def __init__(self, fail: str = "") -> None:
        self.bound: list[tuple[str, str, str, str]] = []
        self.fail = fail

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        if self.fail:
            raise BindError(self.fail)
        self.bound.append((namespace, name, uid, node))


def ledger(reserve: bool = False) -> Ledger:
    lg = Ledger("escher.io")
    for n in NODES:
        lg.upsert_node(n, {"zone": n}, {"cpu": 4000, "memory": 8 << 30, "pods": 10})
    lg.set_capacity(R, {"n0": 2, "n1": 1})
    lg.hold("other", "n0", {R: 2})
    if reserve:
        lg.reserve([("slot", "n2", {"cpu": 3500})])
    return lg


def verbs(
    lg: Ledger,
    binder: Binder | None = None,
    requeue: Requeue | None = None,
    offload: Offload = DEFAULT_OFFLOAD,
    answers: Turns | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Verbs:
    args = GangArgs(plan_offload_above=offload.background, filter_plan_offload_above=offload.filter)
    handle = registry.Handle(lg, KEYS, GangManager(lg, KEYS, args, clock=clock))
    return Verbs(
        lg,
        KEYS,
        handle.gangs,
        registry.build_filters(handle),
        registry.build_scorers(handle),
        binder,
        requeue=requeue,
        answers=answers,
    )


def filtered(v: Verbs, a: ExtenderArgs) -> ExtenderFilterResult:
    """Filter's reply to `a`, its coroutine run to the end."""
    return asyncio.run(v.filter(a)).reply


def pod(uid: str = "u", *, limits: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    return builders.pod(f"p-{uid}", uid=uid, limits=limits or {"cpu": "1"}, **meta)


def args(p: dict[str, Any], nodes: list[str] = NODES) -> ExtenderArgs:
    return msgspec.json.decode(
        msgspec.json.encode({"Pod": p, "NodeNames": nodes}), type=ExtenderArgs
    )


PODS = {
    "plain": pod(),
    "ephemeral": pod(limits={R: "1"}),
    "too-much": pod(limits={R: "3"}),
    "gang-member": pod(labels={"escher.io/gang": "g"}, annotations={"escher.io/gang-min": "2"}),
    "preference": pod(annotations={"escher.io/prefer": "zone=n3"}),
    "big-cpu": pod(limits={"cpu": "1"}),
}


def full_path(v: Verbs, a: ExtenderArgs) -> tuple[list[str], dict[str, Rejection]]:
    """The reference: every enabled filter, in order, on every node, no shortcut."""
    p = v.pod(a.Pod)
    remaining, failed = node_names(a), {}
    for plugin in v.filters:
        verdict = plugin.filter(p, remaining, v.ledger)
        failed.update(verdict.rejected)
        remaining = verdict.passing(remaining)
        if verdict.final:
            break
    return remaining, failed


@pytest.mark.parametrize("reserve", [False, True], ids=["no-reservations", "reservations"])
@pytest.mark.parametrize("kind", list(PODS))
def test_the_fast_path_answers_exactly_as_the_full_path(kind: str, reserve: bool) -> None:
    fast = filtered(verbs(ledger(reserve)), args(PODS[kind]))
    passed, failed = full_path(verbs(ledger(reserve)), args(PODS[kind]))
    expected = _filter_reply(args(PODS[kind]), NODES, passed, failed)
    assert fast == expected


def test_filter_reports_shortfalls_as_kube_scheduler_words_them() -> None:
    r = filtered(verbs(ledger()), args(PODS["ephemeral"]))
    assert r.NodeNames == ["n1"]
    assert r.FailedNodes == {"n0": "Insufficient escher.io/r"}
    assert r.FailedAndUnresolvableNodes == {
        "n2": "node(s) lack escher.io/r",
        "n3": "node(s) lack escher.io/r",
    }


@pytest.mark.parametrize("cache", [True, False], ids=["node-names", "node-list"])
def test_a_gang_member_on_its_place_is_answered_that_node_alone(cache: bool) -> None:
    """A member's filter names only its reserved node: the nodes it does not pass are left
    out rather than each given a reason (kube-scheduler drops them; at 5,000 nodes that is
    one name instead of 4,999 reasons, each way encoded and decoded)."""
    v = verbs(ledger())
    member = PODS["gang-member"]
    names = [f"x{i}" for i in range(500)] + NODES
    for n in names[:500]:
        v.ledger.upsert_node(n, {}, {"cpu": 0, "memory": 0, "pods": 0})
    body = {"Pod": member, "NodeNames": names} if cache else {
        "Pod": member, "Nodes": {"items": [{"metadata": {"name": n}} for n in names]}
    }  # fmt: skip

    def answer() -> tuple[list[str], ExtenderFilterResult]:
        reply = filtered(v, msgspec.json.decode(msgspec.json.encode(body), type=ExtenderArgs))
        if cache:
            return list(reply.NodeNames or []), reply
        assert reply.Nodes is not None
        return [msgspec.json.decode(r)["metadata"]["name"] for r in reply.Nodes.items], reply

    passed, reply = answer()
    assert len(passed) == 1 and passed[0] in NODES  # the one node with room for it
    assert reply.FailedNodes == {} and reply.FailedAndUnresolvableNodes == {}
    assert answer()[0] == passed  # the same member again: its place, still alone


def test_a_gang_planned_in_a_worker_thread_is_answered_as_one_planned_inline() -> None:
    """The gang filter's verdict may be awaited (a large plan runs off the loop): the reply
    is the one an inline plan gives."""
    offloading = verbs(ledger(), offload=Offload(0, 0))
    a = args(PODS["gang-member"])
    assert filtered(offloading, a) == filtered(verbs(ledger()), a)
    assert len(filtered(offloading, a).NodeNames or []) == 1


def test_reserved_capacity_keeps_other_pods_off_only_where_it_is() -> None:
    big = pod(limits={"cpu": "1"})
    r = filtered(verbs(ledger(reserve=True)), args(big))
    assert r.NodeNames == ["n0", "n1", "n3"]
    assert r.FailedNodes == {"n2": "cpu on this node is reserved for a gang"}


def test_a_filter_refused_for_its_pod_learns_no_node() -> None:
    lg = Ledger("escher.io")
    v = Verbs(lg, KEYS, GangManager(lg, KEYS), [], [], None, learn_nodes=True)
    with pytest.raises(BadRequest) as e:
        filtered(v, args(pod(limits={R: "-1"}), ["new-node"]))
    assert e.value.field is not None and e.value.field.startswith("Pod.spec.containers[0]")
    assert lg.node_names() == []
    with pytest.raises(BadRequest) as e:
        filtered(v, args(pod(), ["ok", "Not_A_Name"]))
    assert e.value.field == "NodeNames[1]" and lg.node_names() == []
    filtered(v, args(pod(), ["ok"]))
    assert lg.node_names() == ["ok"]


@pytest.mark.parametrize(
    ("names", "field"),
    [("[1]", "NodeNames[0]"), ('["a", null]', "NodeNames[1]"), ('{"a": 1}', "NodeNames")],
    ids=["number", "null-item", "object"],
)
def test_node_names_that_are_not_strings_are_refused_naming_the_item(
    names: str, field: str
) -> None:
    body = b'{"Pod": {"metadata": {"uid": "u"}}, "NodeNames": ' + names.encode() + b"}"
    a = msgspec.json.decode(body, type=ExtenderArgs)  # decoded only when read
    with pytest.raises(BadRequest) as e:
        filtered(verbs(ledger()), a)
    assert e.value.field == field
    # prioritize checks them too, even for a plain pod it has nothing to say about (the fuzz
    # tier found `[null, null]` answered 200 []).
    preferring = body.replace(
        b'"uid": "u"', b'"uid": "u", "annotations": {"escher.io/prefer": "zone=n3"}'
    )
    for raw in (body, preferring):
        with pytest.raises(BadRequest) as e:
            verbs(ledger()).prioritize(msgspec.json.decode(raw, type=ExtenderArgs))
        assert e.value.field == field


@pytest.mark.parametrize(
    ("kind", "scored"),
    [("plain", False), ("big-cpu", False), ("ephemeral", True), ("preference", True)],
)
def test_prioritize_says_nothing_about_pods_it_has_nothing_to_say_about(
    kind: str, scored: bool
) -> None:
    lg = ledger()
    lg.set_capacity(R, {"n1": 4})  # room to spare: least-allocated has a preference
    scores = verbs(lg).prioritize(args(PODS[kind]))
    assert bool(scores) is scored
    assert all(1 <= s.Score <= 10 for s in scores)


class Fixed:
    """A scorer with fixed answers, for nodes offered or not (a live index's)."""

    name = "fixed"

    def __init__(self, scores: dict[str, int], relevant: bool = True) -> None:
        self.scores, self.is_relevant, self.asked = scores, relevant, 0

    def relevant(self, pod: PodInfo, ledger: Ledger) -> bool:
        return self.is_relevant

    def score(self, pod: PodInfo, nodes: Sequence[str], ledger: Ledger) -> dict[str, int]:
        self.asked += 1
        return self.scores


@pytest.mark.parametrize(
    ("scorers", "offered", "expected"),
    [
        # One scorer: only the offered nodes, 0 left out, over 10 clamped.
        ([({"n0": 4, "n1": 0, "n2": 12, "n3": 7}, 1)], ["n0", "n1", "n2"], {"n0": 4, "n2": 10}),
        # One scorer's weight cancels out.
        ([({"n0": 7}, 5)], ["n0", "n1"], {"n0": 7}),
        # The ledger's own scores: its cache holds n0 and n1, and only n1 is offered.
        (None, ["n1", "n3"], {"n1": 8}),
        # Two scorers of equal weight: the rounded mean, a node one does not score counting 0.
        ([({"n0": 10, "n1": 3}, 1), ({"n0": 6}, 1)], ["n0", "n1", "n2"], {"n0": 8, "n1": 2}),
        # Weighed: (3 x 10) / 4, (3 x 4 + 10) / 4, 10 / 4, rounded.
        (
            [({"n0": 10, "n1": 4}, 3), ({"n1": 10, "n2": 10}, 1)],
            ["n0", "n1", "n2"],
            {"n0": 8, "n1": 6, "n2": 2},
        ),
        # A scorer with nothing to say does not dilute the others.
        ([({"n0": 10, "n1": 5}, 1), ({}, 20)], ["n0", "n1"], {"n0": 10, "n1": 5}),
    ],
    ids=["one-scorer", "one-weighted", "ledger-cache", "mean-of-two", "weighed", "silent"],
)
def test_prioritize_weighs_the_scorers_over_the_offered_nodes_only(
    scorers: list[tuple[dict[str, int], int]] | None,
    offered: list[str],
    expected: dict[str, int],
) -> None:
    lg = ledger()
    lg.set_capacity(R, {"n0": 4, "n1": 4})  # n0 holds 2 of 4: both have room, n1 more
    v = verbs(lg)
    if scorers is not None:
        v.scorers = [Weighted(Fixed(s), w) for s, w in scorers]
    scores = v.prioritize(args(PODS["ephemeral"], offered))
    assert {s.Host: s.Score for s in scores} == expected
    assert len(scores) == len(expected)


LEAST_ALLOCATED = [("n1", 8), ("n2", 5), ("n0", 3)]  # most room first; n3 has no R


@pytest.mark.parametrize(
    ("limits", "marks", "ranked"),
    [
        ({R: "1"}, {}, LEAST_ALLOCATED),
        # The preferred node first, and alone: the others score 0 whatever their room.
        ({R: "1"}, {"prefer": "zone=n0"}, [("n0", 10)]),
        # No node has the first alternative: the nodes with a unit of r free, alike.
        ({R: "1"}, {"prefer": "zone=n9, r"}, [("n0", 10), ("n1", 10), ("n2", 10)]),
        # No node has any alternative: least-allocated, as for a pod without a preference.
        ({R: "1"}, {"prefer": "zone=n9"}, LEAST_ALLOCATED),
        ({"cpu": "1"}, {"prefer": "zone=n2"}, [("n2", 10)]),
        # The fullest node holding r first, and alone, though it has the least room.
        ({R: "1"}, {"pack": "r"}, [("n0", 10)]),
        ({"cpu": "1"}, {"pack": "r"}, [("n0", 10)]),
        # The early return: no ephemeral request, no mark.
        ({"cpu": "1"}, {}, []),
    ],
    ids=[
        "ephemeral",
        "prefer-label",
        "prefer-resource",
        "prefer-nowhere",
        "prefer-no-ephemeral",
        "pack",
        "pack-no-ephemeral",
        "plain",
    ],
)
def test_prioritize_ranks_the_nodes_as_the_pod_asks(
    limits: dict[str, str], marks: dict[str, str], ranked: list[tuple[str, int]]
) -> None:
    lg = ledger()
    lg.set_capacity(R, {"n0": 4, "n1": 4, "n2": 4})
    lg.hold("more", "n2", {R: 1})  # r used: n0 2 of 4, n1 0 of 4, n2 1 of 4
    annotations = {f"escher.io/{k}": v for k, v in marks.items()}
    scores = verbs(lg).prioritize(args(pod(limits=limits, annotations=annotations)))
    assert [(s.Host, s.Score) for s in sorted(scores, key=lambda s: (-s.Score, s.Host))] == ranked


def test_prioritize_asks_no_scorer_about_a_pod_with_no_ephemeral_request_and_no_mark() -> None:
    v = verbs(ledger())
    plain = v.pod(args(PODS["plain"]).Pod)
    assert not any(w.plugin.relevant(plain, v.ledger) for w in v.scorers)
    skipped, asked = Fixed({"n0": 10}, relevant=False), Fixed({"n1": 10})
    v.scorers = [Weighted(skipped, 1), Weighted(asked, 1)]
    assert v.prioritize(args(PODS["plain"])) == [HostPriority(Host="n1", Score=10)]
    assert (skipped.asked, asked.asked) == (0, 1)


def test_the_default_weights_keep_a_preferred_node_above_every_other() -> None:
    """Whatever least-allocated says of either: the preferred node scores 10, the other 0, as
    when Preference scored alone."""
    weight = {e.name: e.weight for e in registry.SCORERS}
    p = builders.info(pod(limits={R: "1"}, annotations={"escher.io/prefer": "zone=n0"}))
    for fit_p, fit_q in itertools.product(range(MAX_SCORE + 1), repeat=2):
        scorers = [
            Weighted(Fixed({"p": fit_p, "q": fit_q}), weight[ephemeral.NAME]),
            Weighted(Fixed({"p": MAX_SCORE, "q": 0}), weight[preference.NAME]),
        ]
        scores = weighted_scores(scorers, p, ["p", "q"], ledger())
        assert [(s.Host, s.Score) for s in scores] == [("p", MAX_SCORE)], (fit_p, fit_q)


def bind_args(uid: str, node: str, name: str | None = None) -> ExtenderBindingArgs:
    return ExtenderBindingArgs(
        PodName=name or f"p-{uid}", PodNamespace="default", PodUID=uid, Node=node
    )


def test_bind_holds_then_binds_a_filtered_pod() -> None:
    lg, binder = ledger(), Binder()
    v = verbs(lg, binder)
    filtered(v, args(pod("a", limits={R: "1"})))
    assert asyncio.run(v.bind(bind_args("a", "n1"))).Error == ""
    assert binder.bound == [("default", "p-a", "a", "n1")]
    h = lg.holding("a")
    assert h is not None and h.kind is HolderKind.ASSUMED and h.node == "n1"
    # A second pod filtered onto the same last unit is refused at bind: no over-commit.
    filtered(v, args(pod("b", limits={R: "1"})))
    result = asyncio.run(v.bind(bind_args("b", "n1")))
    assert "no longer fits" in result.Error and lg.holding("b") is None


@pytest.mark.parametrize(
    ("setup", "request_", "error"),
    [
        pytest.param(None, bind_args("ghost", "n1"), "was not filtered", id="not-filtered"),
        pytest.param("a", bind_args("a", "n1", name="other"), "belongs to pod", id="uid-mismatch"),
        pytest.param("a", bind_args("a", "nowhere"), "is not known", id="unknown-node"),
    ],
)
def test_bind_binds_nothing_it_did_not_filter(
    setup: str | None, request_: ExtenderBindingArgs, error: str
) -> None:
    binder = Binder()
    v = verbs(ledger(), binder)
    if setup:
        filtered(v, args(pod(setup)))
    assert error in asyncio.run(v.bind(request_)).Error
    assert binder.bound == []


def test_gang_members_bind_calls_are_counted_until_they_are_bound() -> None:
    """`members_binding` counts gang members' bind calls in flight (the collector defers its
    full collections while there are any): the first member waits, the second opens it."""
    binder = Binder()
    v = verbs(ledger(), binder)
    gang = {"labels": {"escher.io/gang": "g"}, "annotations": {"escher.io/gang-min": "2"}}
    places = [(filtered(v, args(pod(u, **gang))).NodeNames or [""])[0] for u in "ab"]

    async def scenario() -> list[int]:
        first = asyncio.create_task(v.bind(bind_args("a", places[0])))
        await asyncio.sleep(0.01)
        seen = [v.members_binding]
        second = await v.bind(bind_args("b", places[1]))
        assert second.Error == "" and (await first).Error == ""
        return [*seen, v.members_binding]

    assert asyncio.run(scenario()) == [1, 0]
    assert sorted(b[2] for b in binder.bound) == ["a", "b"]


@pytest.mark.parametrize("per_turn", [1, 2, 3])
@pytest.mark.parametrize("ending", ["opened", "expired"])
def test_a_gangs_bind_answers_go_out_a_few_to_a_turn_of_the_loop(
    per_turn: int, ending: str
) -> None:
    """When the barrier opens, every member's Binding is made and the gang's books kept at
    once, but their answers leave at most `answers.per_turn` to a turn of the event loop; so
    do the refusals of the members held when the gang's reservation expires, all woken at
    once."""
    binder = Binder()
    clock = Clock()
    v = verbs(ledger(), binder, answers=Turns(per_turn), clock=clock)
    members = "abcdefg"
    size = len(members) if ending == "opened" else len(members) + 1  # one never comes
    gang = {
        "labels": {"escher.io/gang": "g"},
        "annotations": {"escher.io/gang-min": str(size), "escher.io/gang-timeout": "5"},
    }
    places = [(filtered(v, args(pod(u, **gang))).NodeNames or [""])[0] for u in members]

    async def scenario() -> tuple[list[int], list[str]]:
        turn = 0
        answered: list[int] = []
        errors: list[str] = []

        async def member(u: str, node: str) -> None:
            errors.append((await v.bind(bind_args(u, node))).Error)
            answered.append(turn)

        tasks = [asyncio.create_task(member(u, n)) for u, n in zip(members, places, strict=True)]
        if ending == "expired":
            await asyncio.sleep(0)  # every member is at the barrier
            clock.now += 10
            assert v.gangs.expire() == 1
        while len(answered) < len(members):
            await asyncio.sleep(0)
            turn += 1
        await asyncio.gather(*tasks)
        return answered, errors

    answered, errors = asyncio.run(scenario())
    if ending == "opened":
        assert len(binder.bound) == len(members) and errors == [""] * len(members)
    else:
        assert binder.bound == [] and all("expired after 5s" in e for e in errors), errors
    assert max(answered.count(t) for t in answered) <= per_turn
    assert len(set(answered)) >= -(-len(members) // per_turn)


def test_bind_without_a_uid_is_a_bad_request() -> None:
    with pytest.raises(BadRequest) as e:
        asyncio.run(verbs(ledger(), Binder()).bind(bind_args("", "n1")))
    assert e.value.field == "PodUID"


def test_a_failed_binding_gives_its_place_back() -> None:
    lg = ledger()
    v = verbs(lg, Binder(fail="the API server is unreachable"))
    filtered(v, args(pod("a", limits={R: "1"})))
    assert "unreachable" in asyncio.run(v.bind(bind_args("a", "n1"))).Error
    assert lg.holding("a") is None and lg.nodes_with(R)["n1"] == 1


def test_the_filtered_pods_are_bounded_by_count_and_by_size() -> None:
    kept = FilteredPods(max_pods=3, max_bytes=1 << 20)
    v = Verbs(Ledger("escher.io"), KEYS, GangManager(Ledger(), KEYS), [], [], None, filtered=kept)
    for i in range(10):
        kept.remember(v.pod(msgspec.convert(pod(str(i)), Pod)))
    assert len(kept) == 3 and kept.get("9") is not None and kept.get("0") is None
    small = FilteredPods(max_pods=1000, max_bytes=4000)
    for i in range(100):
        small.remember(v.pod(msgspec.convert(pod(str(i)), Pod)))
    assert small.bytes <= 4000 and 0 < len(small) < 100


def preempt_args(p: dict[str, Any], victims: dict[str, list[str]]) -> ExtenderPreemptionArgs:
    return ExtenderPreemptionArgs(
        Pod=msgspec.convert(p, Pod),
        NodeNameToMetaVictims={
            n: MetaVictims(Pods=[MetaPod(UID=u) for u in uids]) for n, uids in victims.items()
        },
    )


def test_preempt_keeps_victims_that_free_enough_and_adds_or_drops_otherwise() -> None:
    lg = Ledger("escher.io")
    for n in ("a", "b", "c"):
        lg.upsert_node(n, {}, {"cpu": 4000, "pods": 10})
    lg.set_capacity(R, {"a": 2, "b": 2, "c": 1})
    lg.observe_bound("low1", "a", {R: 1}, priority=1)
    lg.observe_bound("low2", "a", {R: 1}, priority=2)
    lg.observe_bound("low3", "b", {R: 1}, priority=1)
    lg.observe_bound("high", "b", {R: 1}, priority=100)
    lg.observe_bound("cpu-only", "c", {"cpu": 1000}, priority=1)
    hungry = pod("h", limits={R: "2"})
    hungry["spec"]["priority"] = 50
    result = verbs(lg).preempt(
        preempt_args(hungry, {"a": ["low1"], "b": ["low3"], "c": ["cpu-only"]})
    )
    victims = {n: [p.UID for p in mv.Pods] for n, mv in result.NodeNameToMetaVictims.items()}
    # a: low1 frees one unit, low2 (also below 50) is added; b: "high" outranks the pod;
    # c: capacity 1 < 2 whatever is evicted.
    assert victims == {"a": ["low1", "low2"]}


def test_preempt_leaves_kube_schedulers_choice_for_pods_without_ephemeral_requests() -> None:
    lg = ledger()
    lg.observe_bound("v", "n2", {"cpu": 1000})
    result = verbs(lg).preempt(preempt_args(pod(), {"n2": ["v"]}))
    assert [p.UID for p in result.NodeNameToMetaVictims["n2"].Pods] == ["v"]


def test_the_filter_notes_only_a_pod_it_turns_away_from_every_node() -> None:
    lg = Ledger("escher.io")
    for n in ("n0", "n1"):
        lg.upsert_node(n, {}, {"cpu": 4000, "memory": 8 << 30, "pods": 10})
    lg.set_capacity(R, {"n0": 1})
    lg.hold("holder", "n0", {R: 1})
    woken: list[str] = []
    requeue = Requeue(lambda uid, ns, name: woken.append(f"{ns}/{name}"))
    turning = verbs(lg, requeue=requeue)
    assert not filtered(turning, args(pod("w", limits={R: "1"}), ["n0", "n1"])).NodeNames
    assert filtered(turning, args(pod("c", limits={"cpu": "1"}), ["n0", "n1"])).NodeNames
    lg.set_capacity(R, {"n1": 1})
    assert filtered(turning, args(pod("x", limits={R: "1"}), ["n0", "n1"])).NodeNames == ["n1"]
    assert len(requeue) == 1  # only w: c needs nothing, x found a node
    lg.release("holder")
    requeue.released({R: 1})
    assert woken == ["default/p-w"]


@pytest.mark.parametrize("seed", range(40))
def test_weighted_scores_over_the_named_nodes_alone_equal_the_sum_over_every_node(
    seed: int,
) -> None:
    """The shortcut (only nodes a smaller answer names, when the largest alone rounds to 0)
    gives exactly the sum over every offered node, for answers dense and sparse, including
    nodes that were not offered."""
    rng = random.Random(seed)
    offered = [f"n{i}" for i in range(rng.choice([3, 80, 200]))]
    everyone = [*offered, "stranger-0", "stranger-1"]
    maps = [
        {n: rng.randint(0, MAX_SCORE) for n in everyone if rng.random() < density}
        for density in (1.0, rng.choice([0.01, 0.2, 1.0]), rng.choice([0.0, 0.05]))
    ]
    weights = [rng.choice([1, 2]), rng.choice([1, 5, 20, 40]), rng.choice([1, 3])]
    scorers = [Weighted(Fixed(m), w) for m, w in zip(maps, weights, strict=True)]
    p = builders.info(pod(limits={R: "1"}, annotations={"escher.io/pack": "r"}))
    got = {s.Host: s.Score for s in weighted_scores(scorers, p, offered, ledger())}
    said = [(w, m) for w, m in zip(weights, maps, strict=True) if m]
    total = sum(w for w, _ in said)
    want: dict[str, int] = {}
    for n in offered:
        s = (
            round(sum(w * m.get(n, 0) for w, m in said) / total)
            if len(said) > 1
            else (said[0][1].get(n, 0) if said else 0)
        )
        if s:
            want[n] = min(s, MAX_SCORE)
    assert got == want
