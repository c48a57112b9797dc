"""The registries of filter and score plugins, and the handle their factories build on.

kube-scheduler's in-tree registry and default profile in one: each entry names a plugin and
its factory; the filters run in their order, the scorers add up with their weights. Read by
extender.service (and the tests) to build the plugins extender.scheduling.verbs runs. To add
a plugin: write a module with a NAME and a class implementing
extender.core.plugins.FilterPlugin and/or ScorePlugin (in extender.filters, or with its
feature, as the gang filter is in extender.gang), whose `relevant` says which pods are its
business, and list it here. Nothing else decides which pods a plugin sees.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from extender.core.ledger import Ledger
from extender.core.plugins import FilterPlugin, ScorePlugin, Weighted
from extender.core.pod import Keys
from extender.filters import ephemeral, preference, reservation
from extender.gang import Gangs
from extender.gang.plugin import GangFilter


@dataclass(frozen=True, slots=True)
class Handle:
    """What a plugin's factory may build on, as kube-scheduler's framework handle."""

    ledger: Ledger
    keys: Keys
    gangs: Gangs


@dataclass(frozen=True, slots=True)
class FilterEntry:
    name: str
    factory: Callable[[Handle], FilterPlugin]


@dataclass(frozen=True, slots=True)
class ScoreEntry:
    name: str
    factory: Callable[[Handle], ScorePlugin]
    weight: int


# In order: a gang member is narrowed to its reserved node before anything else is checked.
FILTERS: tuple[FilterEntry, ...] = (
    FilterEntry(GangFilter.name, lambda h: GangFilter(h.gangs)),
    FilterEntry(ephemeral.NAME, lambda _: ephemeral.EphemeralResourceFit()),
    FilterEntry(reservation.NAME, lambda _: reservation.ReservationFit()),
)

# A preference outweighs least-allocated whatever either says: prioritize divides the weighted
# sum by the weights of the scorers that answered, so a preferred node scores at least
# round(200 / 21) = 10 and any other at most round(10 / 21) = 0: Preference's 10 points (100 to
# kube-scheduler) stand whole, as when it scored alone. 20 is the least weight that does so
# without a tie at .5 (10 would leave 9 against 1).
SCORERS: tuple[ScoreEntry, ...] = (
    ScoreEntry(ephemeral.NAME, lambda _: ephemeral.EphemeralResourceFit(), weight=1),
    ScoreEntry(preference.NAME, lambda _: preference.Preference(), weight=20),
)


def build_filters(handle: Handle, without: Collection[str] = ()) -> list[FilterPlugin]:
    """The filters, in their order, but those named in `without`."""
    return [e.factory(handle) for e in FILTERS if e.name not in without]


def build_scorers(handle: Handle) -> list[Weighted]:
    """The scorers, each with its weight."""
    return [Weighted(e.factory(handle), e.weight) for e in SCORERS]
