"""Where a gang's members go in the pure approach, topology included: nodes and domains.

A domain is the set of nodes sharing one value of a topology level's node label (a rack, a
zone; extender.gang.topology). `place` turns the cluster state into members per node:

- no level: the nodes with most room first (ESCHER's plan);
- a required level: every member in ONE domain; nodes without the label are unusable. Among
  the domains with room, the best fit (the least room for this gang's shape), so large
  domains stay free for large gangs;
- a preferred level: the fewest domains (`fewest`), the rest on unlabelled nodes when the
  domains cannot hold them all (a preference, not a rule).

A member's room on a node is how many of its shape (`need`) the node has left; a domain's
is the sum over its nodes. Linear in the nodes (and a sort of them). Pure, no I/O. Called by
the gang ESL (extender.esl.gang) and the benchmark's pure runner
(escher_harness.bench.puregang), so both choose alike.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from extender.gang.topology import Level
from extender.policies.api import ClusterState


@dataclass(frozen=True, slots=True)
class Fit:
    """Members per node ({} when the gang does not fit), and, when it does not, why."""

    placed: dict[str, int]
    why: str = ""
    field: str = "members"  # the parameter the refusal is about


def room(
    state: ClusterState, need: Mapping[str, int], use: str, nodes: Iterable[str] | None = None
) -> dict[str, int]:
    """Members of shape `need` each node has room for. `use`: "available" (room now) or
    "capacity" (room on an empty node)."""
    out: dict[str, int] = {}
    for node in state.nodes if nodes is None else nodes:
        res = state.nodes[node]
        fits = [getattr(res[r], use) // v if r in res else 0 for r, v in need.items() if v]
        out[node] = min(fits) if fits else 0
    return out


def fill(
    room: Mapping[str, int], members: int, nodes: Iterable[str] | None = None
) -> dict[str, int]:
    """`members` on `nodes` (default: all), the nodes with most room first, then by name; {}
    when they do not fit."""
    placed: dict[str, int] = {}
    left = members
    for node in sorted(room if nodes is None else nodes, key=lambda n: (-room[n], n)):
        if left <= 0 or room[node] <= 0:
            break
        placed[node] = min(room[node], left)
        left -= placed[node]
    return placed if left <= 0 else {}


def group(
    state: ClusterState, key: str, nodes: Iterable[str] | None = None
) -> dict[str, list[str]]:
    """Domain (the label's value) -> its nodes; nodes without the label are in none."""
    out: dict[str, list[str]] = {}
    labels = state.labels
    for node in state.nodes if nodes is None else nodes:
        value = labels.get(node, {}).get(key)
        if value is not None:
            out.setdefault(value, []).append(node)
    return out


def best_fit(room: Mapping[str, int], members: int) -> str | None:
    """The domain with the least room that still holds `members` (then by name), or None."""
    fits = [(r, d) for d, r in room.items() if r >= members]
    return min(fits)[1] if fits else None


def fewest(room: Mapping[str, int], members: int) -> dict[str, int]:
    """Members per domain over the fewest domains, or {} when all together are too small.

    The domains with most room first until the members are covered (no fewer can: the k
    largest hold the most of any k); then the last one taken is swapped for the smallest
    domain not taken that still holds what is left, so large domains stay free."""
    order = sorted(room, key=lambda d: (-room[d], d))
    taken: dict[str, int] = {}
    left = members
    for i, d in enumerate(order):
        if left <= 0:
            break
        if room[d] <= 0:
            return {}
        if room[d] < left:
            taken[d] = room[d]
            left -= room[d]
            continue
        # The last one: the smallest of it and those after it that holds the rest.
        last = min((room[e], e) for e in order[i:] if room[e] >= left)[1]
        taken[last] = left
        return taken
    return taken if left <= 0 else {}


def _largest(room: Mapping[str, int]) -> tuple[str, int]:
    d = min(room, key=lambda d: (-room[d], d))
    return d, room[d]


def place(
    state: ClusterState,
    members: int,
    need: Mapping[str, int],
    use: str,
    required: Level | None = None,
    preferred: Level | None = None,
    within: Collection[str] | None = None,
) -> Fit:
    """Members per node for a gang of `members` of shape `need`, by room `use` ("available",
    or "capacity" to ask whether it could ever fit). `within`: the one required domain
    to stay in (its label value), when members already hold units there."""
    per_node = room(state, need, use)
    nodes: Iterable[str] = per_node
    if required is not None:
        domains = group(state, required.key)
        if within is not None:
            domains = {d: n for d, n in domains.items() if d in within}
        if not domains:
            why = f"no node has the {required.name} label {required.key}"
            if within is not None:
                why = f"no node is left in {required.name} {', '.join(sorted(within))}"
            return Fit({}, why, "required_topology")
        sums = {d: sum(per_node[n] for n in ns) for d, ns in domains.items()}
        chosen = best_fit(sums, members)
        if chosen is None:
            d, most = _largest(sums)
            if use == "capacity":
                why = f"no {required.name} can ever hold {members} members: the largest holds"
            else:
                why = f"no {required.name} has room for {members} members now: the most is"
            return Fit({}, f"{why} {most} ({required.name} {d})", "required_topology")
        nodes = domains[chosen]
    if preferred is not None and (required is None or preferred.key != required.key):
        nodes = list(nodes)
        domains = group(state, preferred.key, nodes)
        sums = {d: sum(per_node[n] for n in ns) for d, ns in domains.items()}
        share = fewest(sums, members)
        if share:
            placed: dict[str, int] = {}
            for d, k in share.items():
                placed.update(fill(per_node, k, domains[d]))
            return Fit(placed)
        # Best effort: the domains together cannot hold them all, so any nodes will do.
    placed = fill(per_node, members, nodes)
    return Fit(placed) if placed else Fit({}, "", "members")
