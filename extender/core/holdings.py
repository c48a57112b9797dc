"""What holds ephemeral resources on a node (a Holding of a HolderKind), and why a node cannot
take an amount (a Shortfall, returned as a value). Pure values.

Kept by the ledger (extender.core.ledger); read by the scheduling verbs, preemption, the gang
feature and the DRA claims (extender.dra.claims).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from msgspec import Struct


class HolderKind(StrEnum):
    POD = "pod"  # bound, as observed from the API server
    ASSUMED = "assumed"  # accepted for binding, not yet observed bound
    RESERVATION = "reservation"  # places held for pods that have not been placed yet
    CLAIM = "claim"  # mode dra: devices a ResourceClaim holds, as the API server reports


class Holding(Struct, frozen=True, gc=False):
    """Amounts that one holder takes on one node.

    Not tracked by the garbage collector (a msgspec Struct with gc=False): a gang of 1,024
    reserves 1,024 of them at once and a large cluster holds hundreds of thousands, each one
    an object every full collection would walk. A Holding refers only to strings, ints, its
    kind (an enum member) and a dict of ints, none of which refers back: it can be in no
    reference cycle."""

    holder: str
    node: str
    amounts: Mapping[str, int]
    kind: HolderKind
    priority: int = 0  # of a pod: who may preempt it


@dataclass(frozen=True, slots=True)
class Shortfall:
    """Why a node cannot take an amount of a resource (a decision, returned as a value)."""

    node: str
    resource: str
    requested: int
    available: int
    capacity: int

    @property
    def unresolvable(self) -> bool:
        """True when evicting every holder would still not make room."""
        return self.capacity < self.requested

    def __str__(self) -> str:
        # Node-independent, as NodeResourcesFit words it: kube-scheduler counts nodes per
        # distinct reason ("0/4 nodes are available: 3 Insufficient escher.io/x, ...").
        if self.capacity == 0:
            return f"node(s) lack {self.resource}"
        return f"Insufficient {self.resource}"

    @property
    def detail(self) -> str:
        return (
            f"{self.node}: {self.resource} requested {self.requested}, "
            f"available {self.available} of {self.capacity}"
        )
