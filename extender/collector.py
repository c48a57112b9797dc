"""CPython's garbage collector, set for a long-running service whose state is large and
long-lived: applied by extender.server, the process's entry, and nowhere else (tests and
tools that build a Service in their own process keep their collector as it is).

A full (generation 2) collection walks every tracked object alive, and the loop stands still
meanwhile: with the modules of the web stack and a 5,000-node ledger that was tens of
milliseconds, every few seconds under load, the tail of every verb (issue 28). Once the
ledger is built from the cluster, `freeze` collects once and moves everything alive to the
permanent generation, which later collections do not walk: the startup state stays
reachable and is freed by reference counting as ever, only no longer traversed. What is
frozen and later becomes garbage in a reference cycle is never collected; the state alive
at startup (modules, the service's parts, the ledger's containers) is there for the
process's life, so that is bounded by the one freeze.

The state that grows after (holdings, gang places) is kept untracked instead
(extender.core.ledger.Holding, extender.gang.state.Slot): msgspec Structs with gc=False.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger(__name__)


def freeze() -> None:
    """Collect, then move every object alive to the permanent generation (gc.freeze)."""
    start = time.perf_counter()
    gc.collect()
    gc.freeze()
    log.info(
        "garbage collector: startup state frozen",
        extra={
            "objects": gc.get_freeze_count(),
            "ms": round((time.perf_counter() - start) * 1000, 1),
        },
    )
