"""Queues with weighted fair queueing: a fixed number of slots shared by queues by weight.

ESCHER's construction: one resource per queue, starting at 0 (absent); `step()` raises the
queues' capacities in proportion to their weights until `slots` pods run at once in all.
Each pod requests one unit of its queue's resource, so a queue runs at most its share.

Work-conserving when the application reports its backlog (`report({queue: pending})`): a
queue with less demand than its share keeps only what it uses and the rest goes to the
others, by weight (max-min fairness); without reports every queue is taken as backlogged.
Shares never drop below what a queue's running pods hold: they shrink as those finish.

A queue's units are spread over the nodes (fewest units first), since a resource's capacity
is per node. `step()` is called by the application (or, for instances created over HTTP, the
service's step loop). Also used by extender.esl.fairshare for its per-user resources.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field

from extender.esl.base import (
    Backend,
    BackendError,
    BaseESL,
    Change,
    Count,
    ESLParams,
    Key,
    P,
    PodRequest,
    per_node,
)
from extender.policy import ClusterState

NAME = "queues"


class QueuesParams(ESLParams):
    weights: dict[Key, Count] = Field(min_length=1, description="queue -> weight")
    slots: Count = Field(description="pods of all queues running at once")


def weighted_shares(
    total: int, weights: Mapping[str, int], wants: Mapping[str, int]
) -> dict[str, int]:
    """Max-min fair integer shares of `total` by weight, none above its want.

    Water-filling: a queue wanting less than its weighted share gets its want and the rest
    is shared again among the others; the last round is rounded by largest remainder (ties:
    heavier weight, then name).
    """
    shares = dict.fromkeys(weights, 0)
    active = {q for q in weights if wants.get(q, 0) > 0}
    left = total
    while left > 0 and active:
        weight = sum(weights[q] for q in active)
        fair = {q: left * weights[q] / weight for q in active}
        sated = [q for q in active if wants[q] - shares[q] <= fair[q]]
        if sated:
            for q in sated:
                left -= wants[q] - shares[q]
                shares[q] = wants[q]
                active.discard(q)
            continue
        floors = {q: math.floor(fair[q]) for q in active}
        extra = left - sum(floors.values())
        order = sorted(active, key=lambda q: (floors[q] - fair[q], -weights[q], q))
        for i, q in enumerate(order):
            shares[q] += floors[q] + (1 if i < extra else 0)
        left = 0
    return shares


def within(total: int, targets: Mapping[str, int], used: Mapping[str, int]) -> dict[str, int]:
    """`targets` trimmed to sum to at most `total`, never below `used`: while running pods
    of a shrinking share still hold more than it, the others' new units wait. Units not yet
    used are taken back from the key with the most of them first."""
    out = dict(targets)
    excess = sum(out.values()) - total
    while excess > 0:
        k = max(out, key=lambda k: (out[k] - used.get(k, 0), k))
        if out[k] <= used.get(k, 0):
            break  # all held by running pods: they shrink as those finish
        out[k] -= 1
        excess -= 1
    return out


class Resizer(BaseESL[P]):
    """Per-key resources whose cluster-wide totals are set by `resize`, with the backlog
    the application reports per key."""

    def __init__(self, backend: Backend, params: P) -> None:
        super().__init__(backend, params)
        self.backlog: dict[str, int] | None = None

    def report(self, backlog: Mapping[str, int]) -> None:
        """The application's pending pods per key (unlisted keys: none pending)."""
        for k in backlog:
            self.check_key(k)
        self.backlog = {k: max(0, int(backlog.get(k, 0))) for k in self.request_keys()}

    def resize(self, state: ClusterState, targets: Mapping[str, int], why: str) -> list[Change]:
        """Make each key's resource total its target (never below what its pods hold),
        spreading new units over the nodes with the fewest of this instance's units."""
        used = {k: per_node(state, self.full(k)) for k in targets}
        load = dict.fromkeys(state.nodes, 0)
        plan: dict[str, dict[str, int]] = {}
        for k in targets:
            plan[k] = {n: v for n, v in used[k].items() if v}
            for n, v in plan[k].items():
                load[n] = load.get(n, 0) + v
        for k, target in targets.items():
            # Units already granted stay where they are (no churn), then new ones spread.
            for n, cap in sorted(self.where(self.short(k)).items()):
                keep = min(cap - plan[k].get(n, 0), target - sum(plan[k].values()))
                if keep > 0:
                    plan[k][n] = plan[k].get(n, 0) + keep
                    load[n] = load.get(n, 0) + keep
        for k, target in targets.items():
            for _ in range(target - sum(plan[k].values())):
                n = min(load, key=lambda n: (load[n], n))
                plan[k][n] = plan[k].get(n, 0) + 1
                load[n] += 1
        changes: list[Change] = []
        for k in targets:
            short, now = self.short(k), self.where(self.short(k))
            changed: dict[str, int] = {}
            for n in sorted(now.keys() | plan[k].keys()):
                cap = plan[k].get(n, 0)
                if now.get(n, 0) == cap:
                    continue
                try:
                    changed.update(self.set(short, cap, node=n))
                except BackendError as e:
                    if e.status != 409:
                        raise
                    # A pod took a unit after the state was read: the next step sees it.
            if changed:
                changes.append(Change(resource=self.full(k), nodes=changed, why=why))
        return changes


class Queues(Resizer[QueuesParams]):
    NAME = NAME
    PREFIX = "q"
    Params: ClassVar[type[ESLParams]] = QueuesParams

    def apply(self) -> None:
        """Nothing yet: every queue starts at 0; the first step shares the slots."""

    def step(self) -> list[Change]:
        state = self.backend.cluster_state()
        p = self.params
        used = {q: sum(per_node(state, self.full(q)).values()) for q in p.weights}
        pending = dict.fromkeys(p.weights, p.slots) if self.backlog is None else self.backlog
        wants = {q: used[q] + pending.get(q, 0) for q in p.weights}
        shares = weighted_shares(p.slots, p.weights, wants)
        targets = within(p.slots, {q: max(shares[q], used[q]) for q in p.weights}, used)
        return self.resize(state, targets, "weighted fair share")

    def request_keys(self) -> list[str]:
        return list(self.params.weights)

    def requests_for(self, key: str = "") -> PodRequest:
        self.check_key(key)
        return PodRequest(limits={self.full(key): "1"})
