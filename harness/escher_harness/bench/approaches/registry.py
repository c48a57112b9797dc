"""The registry of the gang benchmark's approaches: one row each, in the order the
benchmark runs and reports them (the first rotating per repetition), with its colour in
the plots and whether `bench gang-timeline` traces it (the extender's marks, or an
in-framework peer's group).

As extender.scheduling.registry is for plugins: to add an approach, write a module in this
package with a class implementing escher_harness.bench.approaches.base.Approach, and list it
here. Read by this package's façade (escher_harness.bench.approaches), the gang benchmark's
report and plots, the gang timeline and the CLI's choices.
"""

from __future__ import annotations

from dataclasses import dataclass

from escher_harness.bench.approaches.base import Approach
from escher_harness.bench.approaches.coscheduling import Coscheduling
from escher_harness.bench.approaches.default import Default
from escher_harness.bench.approaches.extender import Extender
from escher_harness.bench.approaches.kueue_tas import KueueTas
from escher_harness.bench.approaches.native import Native
from escher_harness.bench.approaches.pure import Pure
from escher_harness.bench.loc import loc


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    approach: Approach
    colour: str  # matplotlib's
    timeline: bool = False


REGISTRY: tuple[Entry, ...] = (
    Entry("extender", Extender(gate="never"), "C0", timeline=True),
    Entry("extender-gated", Extender(gate="always"), "C1", timeline=True),
    Entry("extender-adaptive", Extender(gate="adaptive"), "C2", timeline=True),
    Entry("extender-marked", Extender(gate="adaptive", marked=True), "C3"),
    Entry("pure", Pure("pure"), "C4"),
    Entry("pure-ghost", Pure("pure", placeholders=True), "C5"),
    Entry("dra", Pure("dra"), "C6"),
    Entry("default", Default(), "C7"),
    Entry("coscheduling", Coscheduling(), "C8", timeline=True),
    Entry("native", Native(), "C9", timeline=True),
    Entry("kueue-tas", KueueTas(), "tab:olive"),
)
_BY_NAME = {e.name: e for e in REGISTRY}

APPROACHES: tuple[str, ...] = tuple(_BY_NAME)
# The approaches run by the pure runner through the policy API (escher_harness.bench.puregang).
POLICY: tuple[str, ...] = tuple(e.name for e in REGISTRY if e.approach.uses_policy)
# The extender's own approaches: those issue 12's targets judge.
EXTENDERS: tuple[str, ...] = tuple(e.name for e in REGISTRY if isinstance(e.approach, Extender))
TIMELINE: tuple[str, ...] = tuple(e.name for e in REGISTRY if e.timeline)


def entry(name: str) -> Entry:
    """The row of approach `name`; ValueError for a name not listed."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(
            f"unknown approach {name!r}; choose from {', '.join(APPROACHES)}"
        ) from None


def get(name: str) -> Approach:
    return entry(name).approach


def policy_loc() -> dict[str, int | None]:
    """Lines of gang policy code per approach: non-blank, non-comment lines of the files
    that implement the gang logic (the peers' from the Go module cache, when present)."""
    out: dict[str, int | None] = {}
    for e in REGISTRY:
        files = e.approach.code()
        out[e.name] = None if files is None else sum(loc(p) for p in files)
    return out
