"""Hierarchical fair sharing: slots shared by groups by weight, then by users within groups.

ESCHER's construction: one resource per user, resized as the shares change (`step()`):
the slots (pods at once) are shared among groups by weight, each group's share among its
users by weight, both max-min fair over demand: a user (or group) wanting less than its
share keeps what it wants and the rest goes to the others. Demand is what the user's pods
hold plus the backlog the application reports (`report({user: pending})`; without reports,
every user is taken as backlogged). Each pod requests one unit of its user's resource.

`step()` is called by the application (or, for instances created over HTTP, the service's
step loop). Called by applications and the /v1/esl endpoints.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from extender.esl.base import MAX_KEYS, Change, Count, ESLParams, Key, PodRequest, per_node
from extender.esl.shares import Resizer, weighted_shares, within

NAME = "fairshare"


class Group(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    weight: Count = 1
    users: dict[Key, Count] = Field(
        min_length=1, max_length=MAX_KEYS, description="user -> weight in the group"
    )


class FairShareParams(ESLParams):
    slots: Count = Field(description="pods of all users running at once")
    groups: dict[Key, Group] = Field(min_length=1, max_length=MAX_KEYS)

    @model_validator(mode="after")
    def _users_unique(self) -> FairShareParams:
        seen: dict[str, str] = {}
        for g, group in self.groups.items():
            for u in group.users:
                if u in seen:
                    raise ValueError(f"user {u} is in both groups {seen[u]} and {g}")
                seen[u] = g
        if len(seen) > MAX_KEYS:
            raise ValueError(f"at most {MAX_KEYS} users in all, not {len(seen)}")
        return self


class FairShare(Resizer[FairShareParams]):
    NAME = NAME
    PREFIX = "fs"
    Params: ClassVar[type[ESLParams]] = FairShareParams

    def apply(self) -> None:
        """Nothing yet: every user starts at 0; the first step shares the slots."""

    def shares(self, used: Mapping[str, int]) -> dict[str, int]:
        p = self.params
        pending = (
            dict.fromkeys(self.request_keys(), p.slots) if self.backlog is None else self.backlog
        )
        wants = {u: used.get(u, 0) + pending.get(u, 0) for u in self.request_keys()}
        group_wants = {g: sum(wants[u] for u in grp.users) for g, grp in p.groups.items()}
        weights = {g: grp.weight for g, grp in p.groups.items()}
        out: dict[str, int] = {}
        for g, share in weighted_shares(p.slots, weights, group_wants).items():
            out.update(weighted_shares(share, p.groups[g].users, wants))
        return out

    def step(self) -> list[Change]:
        state = self.backend.cluster_state()
        used = {u: sum(per_node(state, self.full(u)).values()) for u in self.request_keys()}
        shares = self.shares(used)
        targets = {u: max(shares[u], used[u]) for u in self.request_keys()}
        targets = within(self.params.slots, targets, used)
        return self.resize(state, targets, "hierarchical fair share")

    def request_keys(self) -> list[str]:
        return [u for g in self.params.groups.values() for u in g.users]

    def requests_for(self, key: str = "") -> PodRequest:
        self.check_key(key)
        return PodRequest(limits={self.full(key): "1"})
