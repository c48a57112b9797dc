"""The ledger's indexes, derived from its node views: per ephemeral resource each node's free
units and capacity, the nodes ranked by use and cached LeastAllocated scores; per physical
resource each node's room. Pure Python, no I/O.

They make the filter's and prioritize's answers a lookup per node. The ledger
(extender.core.ledger) updates them under its lock whenever a node's view changes; its readers
(the filter, the preference plugins, prioritize) read them without it.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from extender.core.nodeview import EMPTY

SCORE_CACHES = 4  # cached LeastAllocated answers per resource (distinct amounts asked)


def _least(free: int, cap: int, want: int, top: int) -> int:
    """`top` times the fraction of `cap` left free after taking `want`, rounded."""
    left = free - want
    return int(top * left / cap + 0.5) if left > 0 else 0


class FreeIndex:
    def __init__(self, lock: threading.Lock, version: Callable[[], int]) -> None:
        # The ledger's lock and version: a ranking or score computed without the lock is
        # kept only if nothing changed meanwhile (see _keep).
        self._lock = lock
        self._version = version
        # Ephemeral resource -> node -> free units (the filter's index), and -> capacity.
        self.free: dict[str, dict[str, int]] = {}
        self.caps: dict[str, dict[str, int]] = {}
        # Resource -> (amount, top) -> node -> LeastAllocated score (see _scores_of).
        self.scores: dict[str, dict[tuple[int, int], dict[str, int]]] = {}
        # Resource -> its nodes as (-used, name), sorted: the fullest first, equals by name
        # (see most_used). Only for the resources a pack preference has asked about; kept up
        # to date by update and dropped with the resource.
        self.ranks: dict[str, list[tuple[int, str]]] = {}
        # Physical resource -> node -> what is free of it (allocatable less everything held),
        # for each node that reports it: ReservationFit's check is a lookup per node.
        self.room: dict[str, dict[str, int]] = {}

    # ---- reads (no lock) -------------------------------------------------------------------

    def most_used(self, resource: str, nodes: Sequence[str]) -> str | None:
        """The one of `nodes` with the most units of an ephemeral resource in use (the first
        by name among equals), None when none has it: what a pack preference scores.

        prioritize asks it of every feasible node, 5,000 at a time, so it walks the
        resource's ranking (fullest first) to the first offered node, a set lookup a step:
        the nodes before it are those not offered, mostly the full ones. Even a walk of every
        node costs less than one pass computing each offered node's use (66 us against 490
        at 5,000 nodes), and the set of offered names as much again.
        """
        if not nodes:
            return None
        ranks = self.ranking(resource)
        offered: Sequence[str] | set[str] = set(nodes) if len(nodes) > 8 else nodes
        # A list another thread changes under the walk may be read a step off: a score,
        # not a decision, and the next call reads it right.
        for _, name in ranks:
            if name in offered:
                return name
        return None

    def ranking(self, resource: str) -> Sequence[tuple[int, str]]:
        """The nodes having an ephemeral resource as (-used, name), the fullest first, equals
        by name (built at the first ask, then kept up to date by update); empty if none has
        it. Live: a walk may be read a step off while another thread changes it."""
        caps, free = self.caps.get(resource), self.free.get(resource)
        if not caps or free is None:
            return ()
        ranks = self.ranks.get(resource)
        return ranks if ranks is not None else self._rank(resource, free, caps)

    def _rank(
        self, resource: str, free: dict[str, int], caps: dict[str, int]
    ) -> list[tuple[int, str]]:
        """Build `resource`'s ranking (once; update keeps it). Built from copies without the
        lock (this runs on the event loop), and kept as a cached score is (_keep)."""
        version = self._version()
        pairs, capacity = list(free.items()), dict(caps)
        ranks = sorted((f - capacity[n], n) for n, f in pairs if n in capacity)

        def store() -> None:
            self.ranks[resource] = ranks

        self._keep(version, resource, free, store)
        return ranks

    def least_allocated(
        self, nodes: Iterable[str], request: Mapping[str, int], top: int
    ) -> Mapping[str, int]:
        """Per node, `top` times the mean fraction of each requested resource left free after
        placing `request`, rounded: NodeResourcesFit's LeastAllocated over the ledger. Nodes
        scoring 0 (no room, or too little to round up) are left out: to a caller that adds
        scores up, as kube-scheduler does, absent and 0 are the same.

        For one resource, the answer is the live cache of every node's score, `nodes` or not
        (a ScorePlugin's contract): prioritize then reads it with one lookup per offered node,
        rather than after a copy restricted to them. Read it with `get`, never iterate it: the
        ledger updates it in place."""
        out: dict[str, int] = {}
        if len(request) == 1:  # the common case
            ((res, want),) = request.items()
            return self._scores_of(res, want, top)
        if not request:
            return out
        fractions = dict.fromkeys(nodes, 0.0)
        share = 1 / len(request)
        for res, want in request.items():
            free, caps = self.free.get(res, {}), self.caps.get(res, {})
            for name in fractions:
                left = free.get(name, 0) - want
                if left > 0:
                    fractions[name] += share * left / caps[name]
        for name, fraction in fractions.items():
            if score := int(top * fraction + 0.5):
                out[name] = score
        return out

    def _scores_of(self, res: str, want: int, top: int) -> Mapping[str, int]:
        """LeastAllocated for one resource and amount, per node that has it (nonzero only).

        Kept for the last few (amount, top) of each resource and updated node by node as the
        free index changes, so that prioritize costs a lookup per node. A miss is computed
        without the lock (prioritize runs on the event loop), and kept only if nothing
        changed meanwhile and the lock is free at once (_keep).
        """
        cached = self.scores.get(res, {}).get((want, top))
        if cached is not None:
            return cached
        version = self._version()
        free, caps = self.free.get(res, {}), self.caps.get(res, {})
        # One C-level copy each: another thread may change the index while we read.
        pairs, capacity = list(free.items()), dict(caps)
        scores = {
            n: score
            for n, f in pairs
            if (cap := capacity.get(n)) and (score := _least(f, cap, want, top))
        }

        def store() -> None:
            per = self.scores.setdefault(res, {})
            if len(per) >= SCORE_CACHES:
                del per[next(iter(per))]  # the oldest
            per[(want, top)] = scores

        if free:
            self._keep(version, res, free, store)
        return scores

    def _keep(
        self, version: int, res: str, free: dict[str, int], store: Callable[[], None]
    ) -> None:
        """Run `store` if the lock is free at once and nothing changed since `version` (the
        ledger's version, and `res`'s free index is still `free`): a reader never waits."""
        if self._lock.acquire(blocking=False):
            try:
                if self._version() == version and self.free.get(res) is free:
                    store()
            finally:
                self._lock.release()

    # ---- updates (under the ledger's lock) ---------------------------------------------------

    def update_room(
        self,
        node: str,
        physical: Mapping[str, int],
        used: Mapping[str, int],
        before: Mapping[str, int] = EMPTY,
    ) -> None:
        """Bring the physical free index up to date for one node (`before`: the physical
        resources it reported until now)."""
        for res, cap in physical.items():
            room = self.room.get(res)
            if room is None:
                room = self.room[res] = {}
            room[node] = cap - used.get(res, 0)
        for res in before:
            if res not in physical and (room := self.room.get(res)) is not None:
                room.pop(node, None)

    def update(self, res: str, node: str, cap: int | None, used: int) -> None:
        """Bring `res`'s free index, capacities, ranking and cached scores up to date for one
        node (`cap` None: the node no longer has it)."""
        free = self.free.get(res)
        ranks = self.ranks.get(res)
        if ranks is not None and free is not None and node in free:
            entry = (free[node] - self.caps[res][node], node)
            i = bisect.bisect_left(ranks, entry)
            if i < len(ranks) and ranks[i] == entry:
                del ranks[i]
            else:  # never expected: rebuilt on the next ask rather than kept wrong
                del self.ranks[res]
                ranks = None
        if cap is None:
            if free is None:
                return
            free.pop(node, None)
            self.caps[res].pop(node, None)
            if not free:
                del self.free[res], self.caps[res]
                self.scores.pop(res, None)
                self.ranks.pop(res, None)
                return
        else:
            if free is None:
                free = self.free[res] = {}
                self.caps[res] = {}
            free[node] = cap - used
            self.caps[res][node] = cap
            if ranks is not None:
                bisect.insort(ranks, (-used, node))
        for (want, top), scores in self.scores.get(res, {}).items():
            if cap is not None and (score := _least(cap - used, cap, want, top)):
                scores[node] = score
            else:
                scores.pop(node, None)
