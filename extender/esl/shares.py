"""Weighted max-min fair shares, and resources resized to them: what queues and hierarchical
fair sharing have in common.

`weighted_shares` shares a number of slots by weight, none above its demand; `within` trims
targets to a total without dropping below what running pods hold; `Resizer` is the base of
ESLs with one resource per key whose totals are resized to targets, spread over the nodes.
Used by extender.esl.queues and extender.esl.fairshare; pure but for the backend calls.
"""

from __future__ import annotations

import contextlib
import heapq
import math
from collections.abc import Mapping

from extender.core.errors import Conflict
from extender.esl.base import Backend, BaseESL, Change, P, per_node
from extender.policies.api import ClusterState


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

    STATE = ("backlog",)

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
        # New units one at a time to the least loaded node (then by name): a heap of
        # (load, node), so a step costs units x log(nodes), not units x nodes.
        heap = [(v, n) for n, v in load.items()]
        heapq.heapify(heap)
        for k, target in targets.items():
            for _ in range(target - sum(plan[k].values()) if heap else 0):  # no nodes: none
                v, n = heapq.heappop(heap)
                plan[k][n] = plan[k].get(n, 0) + 1
                heapq.heappush(heap, (v + 1, n))
        changes: list[Change] = []
        for k in targets:
            short, now = self.short(k), self.where(self.short(k))
            changed: dict[str, int] = {}
            for n in sorted(now.keys() | plan[k].keys()):
                cap = plan[k].get(n, 0)
                if now.get(n, 0) == cap:
                    continue
                # A pod may take a unit after the state was read: the next step sees it.
                with contextlib.suppress(Conflict):
                    changed.update(self.set(short, cap, node=n))
            if changed:
                changes.append(Change(resource=self.full(k), nodes=changed, why=why))
        return changes
