"""The plugin protocol of filters and scorers.

Laid out as kube-scheduler's own framework plugins: each plugin has a name constant and
implements Filter and/or Score over a batch of nodes. Decisions are values: a filter returns
a Rejection per node it turns away, a scorer an integer 0..10 per node. Called by
extender.verbs; plugins read the ledger, never the Kubernetes API.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from extender.decisions import PodInfo, Rejection
from extender.gang import GangBook, Wake
from extender.ledger import Ledger

__all__ = ["FilterPlugin", "PluginContext", "PodInfo", "Rejection", "ScorePlugin"]


@dataclass(frozen=True)
class PluginContext:
    """What a plugin may use besides the ledger, given to its factory in the registry."""

    gangs: GangBook
    # Sends wake-ups to gang members' pods (annotations); a no-op in standalone mode.
    notify: Callable[[list[Wake]], None]


class FilterPlugin(Protocol):
    name: str

    def filter(self, pod: PodInfo, nodes: Sequence[str], ledger: Ledger) -> Mapping[str, Rejection]:
        """The nodes (of `nodes`) that cannot take `pod`, each with its reason."""
        ...


class ScorePlugin(Protocol):
    name: str

    def score(self, pod: PodInfo, nodes: Sequence[str], ledger: Ledger) -> Mapping[str, int]:
        """A score in 0..10 for each of `nodes` (missing nodes score 0)."""
        ...
