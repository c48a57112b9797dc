"""Planning a gang: a node for every member at once, or why not. Pure Python, no I/O.

Each wanted place has the member's requests (everything it occupies: cpu, memory, pods,
extended and ephemeral resources) and where it may go: its constraints as far as the
extender can evaluate them (extender.core.constraints), the nodes kube-scheduler itself
found feasible for it when it has constraints only kube-scheduler can evaluate, and the nodes
kube-scheduler refused it since. Nodes are tried in the order given and filled first-fit,
members with the fewest nodes to choose from first (a member pinned to one node must not
find it filled by members that could go anywhere), then the largest: packing gangs onto few
nodes leaves whole nodes for the next gang. `empty=True` plans against capacity alone:
whether the gang could ever fit.

Linear in nodes and members: wants of the same shape (requests, constraints, candidates,
exclusions) form one class, and a node takes as many of a class at once as its free
resources allow, so a node costs a few divisions per class however large the gang, and a
full node is passed over after one.

A Placement (extender.gang.topology) adds the topology, in a few passes over the nodes:
- `pack`: first-fit fills the nodes domain by domain of each level, outermost first, so that
  gangs pack into few domains and leave whole ones free. Domains come in the order of their
  first node and nodes keep their order within one: the caller's order is kept where it
  can be (the manager offers kube-scheduler's candidates first; the asking member goes
  among them anyway, its `candidates` say so). Nodes without a level's label come last.
- `required` level: every member in one domain of it; nodes without its label are not used.
  Of the domains the whole gang fits in, the one left with the least room (how many more
  members of the gang's shape it could take: best fit), so that large domains stay whole
  for large gangs; the first one on ties.
- `preferred` level (inside the required domain if both): as few of its domains as the
  gang fits in, chosen when planning from how many of the gang each domain could take
  alone. One that takes all: best fit, as above. Else the domains that take most, until
  they cover the gang, the last one swapped for the smallest that still covers what is left
  (as few domains, the least fragmentation); then the other domains, then the nodes without
  the label, so that a gang that fits somewhere is never refused for its preference.
What a domain could take is counted in one pass, each class alone, and classes of one shape
(the asking member, held to its offered nodes, beside the rest) no more than the domain's room
for that shape: exact for a gang of one shape (what domains take then adds up), an estimate
for several, which first-fit may then find too much: under `required` the next domain is
tried, under `preferred` the next ones take the rest.

Called by the gang manager (extender.gang.manager).
"""

from __future__ import annotations

import itertools
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias, cast

from extender.core.constraints import Constraints
from extender.core.ledger import NodeView
from extender.gang.topology import Level, Placement


@dataclass(frozen=True, slots=True)
class Want:
    """One place to find: `ref` names it (a member's uid, or a slot for a member to come)."""

    ref: str
    amounts: Mapping[str, int]
    constraints: Constraints | None = None
    # Nodes kube-scheduler found feasible for the member (None: any the constraints allow).
    candidates: frozenset[str] | None = None
    # Nodes kube-scheduler refused the member since it was last planned.
    excluded: frozenset[str] = frozenset()

    def allows(self, node: NodeView) -> bool:
        if node.name in self.excluded:
            return False
        if self.candidates is not None and node.name not in self.candidates:
            return False
        return self.constraints is None or not self.constraints.check(node)


@dataclass(frozen=True, slots=True)
class Planned:
    """A node for every want (ref -> node name). `domains`: how many domains of the
    placement's level they span (its preferred level, else its required one: 1; 0 without)."""

    places: dict[str, str]
    domains: int = 0


@dataclass(frozen=True, slots=True)
class Unplaced:
    """Why the wants do not all fit, in words (under a required level: its largest take)."""

    reason: str


Result: TypeAlias = Planned | Unplaced


def plan(
    wants: Sequence[Want],
    nodes: Iterable[NodeView],
    prefix: str,
    empty: bool = False,
    *,
    placement: Placement | None = None,
) -> Result:
    """A node for every want, or why they do not all fit (the module's docstring says how)."""
    views = nodes if isinstance(nodes, list) else list(nodes)
    if not wants:
        return Planned({})
    gang = _Gang(wants, views, prefix, empty)
    if placement is None:
        return gang.planned(views, None, [])
    keys = [level.key for level in placement.pack]
    if placement.required is None:
        return gang.planned(views, placement.preferred, keys)
    return gang.within(views, placement.required, placement.preferred, keys)


# Past this many nodes a member counts as free to go anywhere: counting stops there, so a
# loose member costs a short scan of a large cluster, not a full one.
_LOOSE = 64


def _choice(w: Want, views: Sequence[NodeView]) -> int:
    """How many nodes `w` may go to, up to _LOOSE."""
    if w.constraints is None and w.candidates is None and not w.excluded:
        return _LOOSE
    n = 0
    for view in views:
        if w.allows(view):
            n += 1
            if n >= _LOOSE:
                break
    return n


def _size(w: Want) -> tuple[int, int, str]:
    """Largest first, then by ref (a stable order)."""
    return (-w.amounts.get("cpu", 0), -w.amounts.get("memory", 0), w.ref)


class _Class:
    """Wants of one shape: the same requests and the same nodes allowed."""

    __slots__ = ("amounts", "loose", "shape", "takes", "want", "wants")

    def __init__(
        self, want: Want, shape: tuple[tuple[str, int], ...], prefix: str, empty: bool
    ) -> None:
        self.want = want  # stands for all: allows() is the same for each
        self.wants = [want]
        self.shape = shape
        # Only positive amounts take room (and divide).
        self.amounts = tuple((r, v) for r, v in shape if v > 0)
        self.takes = _takes_of(self.amounts, prefix, empty)
        self.loose = want.constraints is None and want.candidates is None and not want.excluded


# Per class, the nodes used and how many members each takes.
_Took = list[list[tuple[NodeView, int]]]


class _Gang:
    """The wants of one plan, in classes, and the passes over nodes that place them."""

    def __init__(
        self, wants: Sequence[Want], views: Sequence[NodeView], prefix: str, empty: bool
    ) -> None:
        self.n = len(wants)
        self.empty = empty
        # Members built from one pod share their objects: the identity of the parts finds a
        # want's class at the cost of a dict lookup; equality (Constraints holds a dict, so
        # it is not hashable) merges the rest.
        by_id: dict[tuple[int, int, int, int], _Class] = {}
        by_value: dict[tuple[object, ...], list[_Class]] = {}
        classes: list[_Class] = []
        for w in wants:
            ik = (id(w.amounts), id(w.constraints), id(w.candidates), id(w.excluded))
            c = by_id.get(ik)
            if c is not None:
                c.wants.append(w)
                continue
            shape = tuple(sorted(w.amounts.items()))
            same = by_value.setdefault((shape, w.candidates, w.excluded), [])
            for c in same:
                if c.want.constraints == w.constraints:
                    c.wants.append(w)
                    break
            else:
                c = _Class(w, shape, prefix, empty)
                same.append(c)
                classes.append(c)
            by_id[ik] = c
        for c in classes:
            c.wants.sort(key=lambda w: w.ref)
            c.want = c.wants[0]
        # Fewest nodes to choose from first, then the largest, then by ref (a stable order).
        classes.sort(key=lambda c: (_choice(c.want, views), *_size(c.want)))
        self.classes = classes
        self.free = _free_of(sorted({r for c in classes for r, _ in c.amounts}), prefix, empty)
        # The gang's shape: its largest class (the first of them).
        self.main = max(range(len(classes)), key=lambda i: len(classes[i].wants))
        # The least every member takes of the resources all of them take: a node short of it
        # takes none of the gang, and is passed over at the cost of one class, not of each.
        floor = dict(classes[0].amounts)
        for c in classes[1:]:
            theirs = dict(c.amounts)
            floor = {r: min(a, theirs[r]) for r, a in floor.items() if r in theirs}
        self.floor = _takes_of(tuple(floor.items()), prefix, empty) if floor else None
        self.floored = bool(floor) and floor == dict(classes[self.main].amounts)
        # Classes of one shape that differ only in where they may go (the asking member,
        # held to the nodes kube-scheduler offered it, beside the rest of its gang): they
        # share each node's room, so what a domain takes of them together is bounded by its
        # room for that shape (measure). Counted alone, each would claim the same room.
        by_shape: dict[tuple[tuple[str, int], ...], list[int]] = {}
        for i, c in enumerate(classes):
            by_shape.setdefault(c.amounts, []).append(i)
        self.shared = [g for g in by_shape.values() if len(g) > 1]

    def fill(self, views: Iterable[NodeView]) -> tuple[_Took, int]:
        """First-fit over `views`: where each class goes, and how many members are placed."""
        classes = self.classes
        left = [len(c.wants) for c in classes]
        took: _Took = [[] for _ in classes]
        total = self.n
        free_of, floor = self.free, self.floor
        for view in views:
            if floor is not None and not floor(view):
                continue
            free = None
            for i, c in enumerate(classes):
                k = left[i]
                if not k or not (c.loose or c.want.allows(view)):
                    continue
                if free is None:
                    # Nothing placed here yet: ask the node itself, so that a node too full
                    # for the member costs no dict (most of a busy cluster's nodes).
                    f = c.takes(view)
                    if f < k:
                        k = f
                    if k <= 0:
                        continue
                    free = free_of(view)
                else:
                    for r, a in c.amounts:
                        f = free[r] // a
                        if f < k:
                            k = f
                    if k <= 0:
                        continue
                for r, a in c.amounts:
                    free[r] -= a * k
                took[i].append((view, k))
                left[i] -= k
                total -= k
                if not total:
                    return took, self.n
        return took, self.n - total

    def measure(self, views: Iterable[NodeView]) -> tuple[int, int]:
        """What `views` could do for the gang, in one pass that builds nothing: how many of
        its members they could take, each class counted alone up to its count (adds up over
        disjoint domains; exact for a gang of one class), and their room, how many members of
        its largest class they could take (what best fit minimises: the room a domain keeps
        is for gangs like this one)."""
        classes, main, floored = self.classes, self.main, self.floored
        counts = [len(c.wants) for c in classes]
        caps = [0] * len(classes)
        big = classes[main]
        # The other classes count only up to their size: once they have it, the pass is
        # one class's.
        others = [i for i in range(len(classes)) if i != main]
        # A node short of the floor takes none of the gang: when the largest class takes
        # just the floor, counting it tells as much; otherwise the floor is checked first.
        floor = None if floored else self.floor
        shared = self.shared
        wanted = [sum(counts[i] for i in group) for group in shared]
        rooms = [0] * len(shared)
        for view in views:
            if floor is not None and not floor(view):
                continue
            if big.loose or big.want.allows(view):
                k = big.takes(view)
                if not k and floored:
                    continue
                caps[main] += k
            if others:
                for i in others:
                    c = classes[i]
                    if c.loose or c.want.allows(view):
                        caps[i] += c.takes(view)
                others = [i for i in others if caps[i] < counts[i]]
            for j, group in enumerate(shared):
                if rooms[j] < wanted[j] and any(
                    classes[i].loose or classes[i].want.allows(view) for i in group
                ):
                    rooms[j] += classes[group[0]].takes(view)
        took = [min(a, b) for a, b in zip(caps, counts, strict=True)]
        fit = sum(took)
        for j, group in enumerate(shared):  # one shape's classes share the nodes' room
            alone = sum(took[i] for i in group)
            fit -= alone - min(alone, rooms[j])
        return fit, caps[main]

    def spread(self, views: list[NodeView], level: Level, keys: list[str]) -> Iterator[NodeView]:
        """`views` ordered so that first-fit spans as few domains of `level` as it can, packed
        by the levels of `keys` outside it, then inside each domain."""
        n = self.n
        outer, inner = _around(keys, level.key)
        groups, bare = _split(_pack(views, outer), level.key)
        fit, room = {}, {}
        for d, nodes in groups.items():
            fit[d], room[d] = self.measure(nodes)
        ranked = sorted(groups, key=lambda d: -fit[d])  # stable: first domain first on ties
        whole = [d for d in ranked if fit[d] >= n]
        if whole:
            chosen = [min(whole, key=room.__getitem__)]
        else:
            chosen, covered = [], 0
            for d in ranked:
                if covered >= n:
                    break
                chosen.append(d)
                covered += fit[d]
            if covered >= n:
                rest = n - covered + fit[chosen[-1]]
                chosen[-1] = min(
                    (d for d in ranked[len(chosen) - 1 :] if fit[d] >= rest), key=fit.__getitem__
                )
        picked = set(chosen)
        for d in chosen + [d for d in ranked if d not in picked]:
            yield from _pack(groups[d], inner)
        yield from _pack(bare, inner)

    def planned(self, views: list[NodeView], preferred: Level | None, keys: list[str]) -> Result:
        if preferred is None:
            # Levels no node carries order nothing; finding that is cheaper than a split.
            keys = [k for k in keys if any(k in v.labels for v in views)]
        order = _pack(views, keys) if preferred is None else self.spread(views, preferred, keys)
        took, placed = self.fill(order)
        if placed < self.n:
            return Unplaced(f"only {placed} of {self.who()} fit the nodes they may use{self.even}")
        return Planned(self.places(took), 0 if preferred is None else _spans(took, preferred))

    def within(
        self, views: list[NodeView], required: Level, preferred: Level | None, keys: list[str]
    ) -> Result:
        """Every member in one domain of `required`: the best fit of those the gang fits,
        tried by least room (first-fit confirms; the first domain first on ties). The levels
        of `keys` outside `required` would only order its domains: the caller's order does."""
        inner = _around(keys, required.key)[1]
        groups = _split(views, required.key)[0]
        if not groups:
            return Unplaced(
                f"no {required.name} has room for {self.who()}: no node has {required.key}"
            )
        fit, room = {}, {}
        for d, nodes in groups.items():
            fit[d], room[d] = self.measure(nodes)
        for d in sorted((d for d in groups if fit[d] >= self.n), key=room.__getitem__):
            nodes = groups[d]
            if preferred is None:
                took, placed = self.fill(_pack(nodes, inner))
            else:
                took, placed = self.fill(self.spread(nodes, preferred, inner))
            if placed == self.n:
                return Planned(
                    self.places(took), 1 if preferred is None else _spans(took, preferred)
                )
        largest = max(groups, key=fit.__getitem__)  # the first of the largest
        return Unplaced(
            f"no {required.name} has room for {self.who()}{self.even}: the largest takes "
            f"{self.fill(groups[largest])[1]} ({required.name} {largest})"
        )

    def places(self, took: _Took) -> dict[str, str]:
        """Ref -> node: each class's wants in ref order, along the nodes it took."""
        out: dict[str, str] = {}
        for c, used in zip(self.classes, took, strict=True):
            refs = iter(c.wants)
            for view, k in used:
                for _ in range(k):
                    out[next(refs).ref] = view.name
        return out

    def who(self) -> str:
        shapes = {c.shape for c in self.classes}
        if len(shapes) != 1:
            return f"{self.n} member(s)"
        return f"{self.n} member(s) of {', '.join(f'{r}={v}' for r, v in shapes.pop())}"

    @property
    def even(self) -> str:
        return ", even empty" if self.empty else ""


def _free_of(
    resources: list[str], prefix: str, empty: bool
) -> Callable[[NodeView], dict[str, int]]:
    """What a node has free of `resources` (its capacity alone when `empty`)."""
    kinds = [(r, r.startswith(prefix)) for r in resources]

    def free(view: NodeView) -> dict[str, int]:
        used = view.used
        out = {}
        for r, ephemeral in kinds:
            cap = (view.ephemeral if ephemeral else view.physical).get(r, 0)
            out[r] = cap if empty else cap - used.get(r, 0)
        return out

    return free


def _takes_of(
    amounts: tuple[tuple[str, int], ...], prefix: str, empty: bool
) -> Callable[[NodeView], int]:
    """How many members of positive `amounts` a node has room for (from the free resources
    of _free_of, without building them); sys.maxsize when they take nothing."""
    kinds = [(r, a, r.startswith(prefix)) for r, a in amounts]

    def takes(view: NodeView) -> int:
        used = view.used
        k = sys.maxsize
        for r, a, ephemeral in kinds:
            cap = (view.ephemeral if ephemeral else view.physical).get(r, 0)
            f = (cap if empty else cap - used.get(r, 0)) // a
            if f < k:
                if f <= 0:
                    return 0
                k = f
        return k

    return takes


def _split(views: Iterable[NodeView], key: str) -> tuple[dict[str, list[NodeView]], list[NodeView]]:
    """The nodes by their value of label `key`, in the order of each domain's first node;
    and those without it."""
    groups: defaultdict[str | None, list[NodeView]] = defaultdict(list)
    for view in views:
        groups[view.labels.get(key)].append(view)
    bare = groups.pop(None, [])
    return cast(dict[str, list[NodeView]], groups), bare


def _pack(views: list[NodeView], keys: list[str]) -> Iterable[NodeView]:
    """`views` domain by domain of each label key, outermost first (see the docstring).
    Lazy below the outermost level: first-fit stops early, and regroups only what it reaches."""
    if not keys or len(views) < 2:
        return views
    groups, bare = _split(views, keys[0])
    if len(groups) == len(views):  # a domain per node (the hostname): nothing to regroup
        return views
    rest = keys[1:]
    return itertools.chain.from_iterable(_pack(g, rest) for g in [*groups.values(), bare])


def _around(keys: list[str], key: str) -> tuple[list[str], list[str]]:
    """The label keys of `keys` (levels, outermost first) outside level `key` and inside it;
    all inside when `key` is not one of them (a label of its own)."""
    if key not in keys:
        return [], keys
    i = keys.index(key)
    return keys[:i], keys[i + 1 :]


def _spans(took: _Took, level: Level) -> int:
    """How many domains of `level` the nodes used are in."""
    key = level.key
    return len({v.labels[key] for used in took for v, _ in used if key in v.labels})
