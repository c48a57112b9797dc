"""Filter and score plugins, and their explicit registry.

The registry maps each plugin's NAME to its class, as kube-scheduler's in-tree registry
does; extender.verbs runs the enabled ones in order. To add a plugin: write a module with a
NAME constant and a class implementing FilterPlugin and/or ScorePlugin (extender.filters.base),
and list it here.
"""

from __future__ import annotations

from collections.abc import Callable

from extender.filters import ephemeral, gang, preference, reservation
from extender.filters.base import FilterPlugin, PluginContext, PodInfo, Rejection, ScorePlugin

Plugin = FilterPlugin | ScorePlugin

REGISTRY: dict[str, Callable[[PluginContext], Plugin]] = {
    gang.NAME: gang.Gang,
    ephemeral.NAME: ephemeral.EphemeralResourceFit,
    reservation.NAME: reservation.ReservationFit,
    preference.NAME: preference.Preference,
}

# In order: a gang member is narrowed to its reserved node before anything else is checked.
DEFAULT_FILTERS = (gang.NAME, ephemeral.NAME, reservation.NAME)
# Preference scores pods with escher.io/prefer or escher.io/pack and gives the others
# EphemeralResourceFit's score: the verbs average scorers, which would halve a preference.
DEFAULT_SCORERS = (preference.NAME,)

__all__ = [
    "DEFAULT_FILTERS",
    "DEFAULT_SCORERS",
    "REGISTRY",
    "FilterPlugin",
    "PluginContext",
    "PodInfo",
    "Rejection",
    "ScorePlugin",
]
