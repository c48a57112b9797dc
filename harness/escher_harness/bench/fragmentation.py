"""Fragmentation in the gang benchmark: how many whole racks and blocks stay free over a run.

An approach that packs gangs into few domains leaves whole racks and blocks free for later
large gangs (a gang of 1,024 on the `topology` preset needs a whole empty block); one that
spreads its members over the cluster leaves none. This measures it from the run's event log
(escher_harness.bench.trace) and the nodes' topology labels (a pure function of the node's
index, as in escher_harness.bench.topology).

Definitions (the report repeats them):
- A pod *holds* its node from the moment it is first seen bound (BOUND, or HELD for a
  placeholder: both carry the node) until it is seen Succeeded or deleted (SUCCEEDED,
  UNBOUND, RELEASED). The log has the trace's gangs' pods only (the uncounted warm-up gang
  is gone before the clock starts).
- A domain (rack or block) is *free* while no pod holds any of its nodes. Every domain of the
  cluster counts, the last of a level too, though it may be smaller than the others.
- The *window* runs from the first gang's submission (the first SUBMIT) to the last gang's
  end (the last DONE or TIMEOUT; the log's last event if no gang ended). The free counts
  form a step function over it, changing only at events, so the figures are exact, not
  sampled: the *minimum* of free domains over the window, and their *time-weighted mean*
  (the integral over the window divided by its length), each also as a % of the level's
  domains. The window's edges count (all is free until the first member binds): a short
  run's figures lean on them.
Pure, no I/O. Called by escher_harness.bench.gang_bench.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any

from escher_harness.bench.topology import SPAN_LEVELS
from escher_harness.bench.trace import Event, Kind
from escher_harness.localcluster.fakenodes import Topology, node_index

_HOLD = (Kind.BOUND, Kind.HELD)
_FREE = (Kind.SUCCEEDED, Kind.UNBOUND, Kind.RELEASED)
_END = (Kind.DONE, Kind.TIMEOUT)

# (seconds since START, free domains by level in SPAN_LEVELS' order) after each change.
Series = list[tuple[float, ...]]


def domains(topology: Topology, nodes: int) -> dict[str, int]:
    """How many domains of each level (rack, block) a cluster of `nodes` nodes has."""
    return {lv: len({topology.domains(i)[lv] for i in range(nodes)}) for lv in SPAN_LEVELS}


def free_series(events: Sequence[Event], topology: Topology, total: Mapping[str, int]) -> Series:
    """The free domains at each level over the run's window (see the module's definitions):
    the value at its start, then one step per event that changes it, then the value at its
    end. `total`: the cluster's domains (domains()). Empty if no gang was submitted."""
    events = sorted(events, key=lambda e: e.t)
    submits = [e.t for e in events if e.kind is Kind.SUBMIT]
    if not submits:
        return []
    starts = [e.t for e in events if e.kind is Kind.START]
    zero = starts[0] if starts else events[0].t
    first = submits[0]
    ends = [e.t for e in events if e.kind in _END]
    last = max(ends[-1] if ends else events[-1].t, first)
    held: dict[str, tuple[str, ...]] = {}  # pod -> the domains it holds, in SPAN_LEVELS' order
    pods_in: Counter[str] = Counter()  # domain -> pods holding it
    busy = dict.fromkeys(SPAN_LEVELS, 0)  # level -> domains some pod holds

    def free() -> tuple[int, ...]:
        return tuple(total[lv] - busy[lv] for lv in SPAN_LEVELS)

    series: Series = []
    for e in events:
        if e.t > last:
            break
        if e.kind in _HOLD and e.node and e.pod not in held:
            of = topology.domains(node_index(e.node))
            held[e.pod] = tuple(of[lv] for lv in SPAN_LEVELS)
            for lv, d in zip(SPAN_LEVELS, held[e.pod], strict=True):
                pods_in[d] += 1
                busy[lv] += pods_in[d] == 1
        elif e.kind in _FREE and e.pod in held:
            for lv, d in zip(SPAN_LEVELS, held.pop(e.pod), strict=True):
                pods_in[d] -= 1
                busy[lv] -= pods_in[d] == 0
        if e.t < first:
            continue
        now = free()
        if not series:
            series.append((first - zero, *now))
        elif now != series[-1][1:]:
            series.append((e.t - zero, *now))
    series.append((last - zero, *free()))
    return series


def figures(series: Series, total: Mapping[str, int]) -> dict[str, Any]:
    """The run's figures from free_series (see the module's definitions); {} if empty.
    Keys: `free_<level>s_min`, `_mean`, `_min_pct`, `_mean_pct`, the level's `<level>s`
    (its domains) and `window_s`."""
    if not series:
        return {}
    start, end = series[0][0], series[-1][0]
    out: dict[str, Any] = {"window_s": round(end - start, 3)}
    for i, lv in enumerate(SPAN_LEVELS, start=1):
        values = [s[i] for s in series]
        if end > start:
            area = sum(s[i] * (nxt[0] - s[0]) for s, nxt in pairwise(series))
            mean = area / (end - start)
        else:
            mean = float(values[0])
        low = min(values)
        n = total[lv]
        out[f"{lv}s"] = n
        out[f"free_{lv}s_min"] = low
        out[f"free_{lv}s_mean"] = round(mean, 2)
        out[f"free_{lv}s_min_pct"] = round(100 * low / n, 1) if n else None
        out[f"free_{lv}s_mean_pct"] = round(100 * mean / n, 1) if n else None
    return out
