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
service's step loop).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from extender.esl.base import MAX_KEYS, Change, Count, ESLParams, Key, PodRequest, per_node
from extender.esl.shares import Resizer, weighted_shares, within

NAME = "queues"


class QueuesParams(ESLParams):
    weights: dict[Key, Count] = Field(
        min_length=1, max_length=MAX_KEYS, description="queue -> weight"
    )
    slots: Count = Field(description="pods of all queues running at once")


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
