"""E6's gang designs, the paper's Fig. 7 mapped onto what exists here, each an Approach of the
gang benchmark (escher_harness.bench.approaches) with its lines of policy counted the same
way for all (escher_harness.bench.loc: code lines, not blank, comment or docstring lines):

- appspace: the application does it, with placeholders and timeouts: the registry's
  `pure-ghost` (ESCHER's ghost tasks, rollback and back-off on timeout).
- libspace: a library that serialises gangs through the policy API: the pure runner in its
  plan variant (the gang ESL plans each gang from the cluster state), one gang at a time in
  the process (escher_harness.bench.paper.libspace), so no two plans race for the same room.
- framespace: inside the framework: the extender's reservation, as deploy/ runs it (the
  registry's `extender-adaptive`).
- native and coscheduling: today's in-framework references (Kubernetes' own gang
  scheduling; scheduler-plugins' Coscheduling).

Used by escher_harness.bench.paper.e6_gangs (the runs) and fig7 (the report).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from escher_harness.bench.approaches import get
from escher_harness.bench.approaches.base import Approach
from escher_harness.bench.loc import loc
from escher_harness.bench.paper.libspace import Serialised


@dataclass(frozen=True)
class Design:
    name: str
    approach: Approach
    what: str  # how it maps onto this project, for the report


DESIGNS: Final[Mapping[str, Design]] = {
    d.name: d
    for d in (
        Design("appspace", get("pure-ghost"), "pure-ghost: placeholders, timeouts, rollback"),
        Design("libspace", Serialised("pure"), "pure plan, gangs serialised in the library"),
        Design("framespace", get("extender-adaptive"), "extender-adaptive: the reservation"),
        Design("native", get("native"), "Kubernetes' own gang scheduling"),
        Design("coscheduling", get("coscheduling"), "scheduler-plugins Coscheduling"),
    )
}
QUICK: Final = ("appspace", "libspace", "framespace")


def policy_loc(name: str) -> int | None:
    """Lines of gang policy of design `name` (None: its code is not on this machine); libspace
    counts appspace's runner and ESL plus its serialising module."""
    files = DESIGNS[name].approach.code()
    return None if files is None else sum(loc(p) for p in files)
