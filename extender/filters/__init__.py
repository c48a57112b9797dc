"""Filter and score plugins, and their explicit registry.

The registry maps each plugin's name to its factory, as kube-scheduler's in-tree registry
does; extender.scheduling.verbs runs the enabled ones in order. To add a plugin: write a
module with a NAME and a class implementing extender.core.plugins.FilterPlugin and/or
ScorePlugin, and list it here. The gang feature's filter lives with the rest of that feature
(extender.gang).
"""

from __future__ import annotations

from collections.abc import Callable

from extender.core.plugins import FilterPlugin, ScorePlugin
from extender.filters import ephemeral, preference, reservation
from extender.gang.manager import GangManager
from extender.gang.plugin import GangFilter

Plugin = FilterPlugin | ScorePlugin

REGISTRY: dict[str, Callable[[GangManager], Plugin]] = {
    GangFilter.name: GangFilter,
    ephemeral.NAME: lambda _: ephemeral.EphemeralResourceFit(),
    reservation.NAME: lambda _: reservation.ReservationFit(),
    preference.NAME: lambda _: preference.Preference(),
}

# In order: a gang member is narrowed to its reserved node before anything else is checked.
DEFAULT_FILTERS = (GangFilter.name, ephemeral.NAME, reservation.NAME)
# Preference scores pods with escher.io/prefer or escher.io/pack and gives the others
# EphemeralResourceFit's score: averaging two scorers would halve a preference.
DEFAULT_SCORERS = (preference.NAME,)

__all__ = ["DEFAULT_FILTERS", "DEFAULT_SCORERS", "REGISTRY", "GangFilter", "Plugin"]
