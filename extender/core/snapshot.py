"""What the ledger hands out whole: a Snapshot (a consistent copy at one version) and the
Totals the metrics report. Pure values.

Made by the ledger (extender.core.ledger); read by the policy API, the ESLs, get_cluster_state
and the metrics collector (extender.service).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from extender.core.holdings import HolderKind, Holding
from extender.core.nodeview import NodeView


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A consistent copy of the whole ledger at one version (dicts of immutable parts)."""

    version: int
    nodes: Mapping[str, NodeView]
    holdings: Mapping[str, Holding]


@dataclass(frozen=True, slots=True)
class Totals:
    """What the metrics report, maintained as changes happen (no scan of the nodes)."""

    version: int
    nodes: int
    resources: int
    holdings: Mapping[HolderKind, int]
