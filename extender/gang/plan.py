"""Planning a gang: a node for every member at once, or none. Pure Python, no I/O.

Each wanted place has the member's requests (everything it occupies: cpu, memory, pods,
extended and ephemeral resources) and where it may go: its constraints as far as the
extender can evaluate them (extender.core.constraints), the nodes kube-scheduler itself
found feasible for it when it has constraints only kube-scheduler can evaluate, and the nodes
kube-scheduler refused it since. Nodes are tried in the order given and filled first-fit,
members with the fewest nodes to choose from first (a member pinned to one node must not
find it filled by members that could go anywhere), then the largest: packing gangs onto few
nodes leaves whole nodes for the next gang. `empty=True` plans against capacity alone:
whether the gang could ever fit.
Called by the gang manager (extender.gang.manager).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from extender.core.constraints import Constraints
from extender.core.ledger import NodeView


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


def plan(
    wants: Sequence[Want], nodes: Iterable[NodeView], prefix: str, empty: bool = False
) -> dict[str, str] | None:
    """A node per want (ref -> node name), or None when they do not all fit."""
    views = nodes if isinstance(nodes, list) else list(nodes)
    remaining = sorted(wants, key=lambda w: (_choice(w, views), *_size(w)))
    resources = {r for w in wants for r in w.amounts}
    placed: dict[str, str] = {}
    for view in views:
        if not remaining:
            break
        free: dict[str, int] | None = None
        left = []
        for w in remaining:
            if not w.allows(view):
                left.append(w)
                continue
            if free is None:
                free = _free(view, resources, prefix, empty)
            if all(free.get(r, 0) >= v for r, v in w.amounts.items() if v > 0):
                for r, v in w.amounts.items():
                    free[r] = free.get(r, 0) - v
                placed[w.ref] = view.name
            else:
                left.append(w)
        remaining = left
    return placed if not remaining else None


def _free(view: NodeView, resources: Iterable[str], prefix: str, empty: bool) -> dict[str, int]:
    out = {}
    for r in resources:
        cap = view.ephemeral.get(r, 0) if r.startswith(prefix) else view.physical.get(r, 0)
        out[r] = cap if empty else cap - view.used.get(r, 0)
    return out


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
