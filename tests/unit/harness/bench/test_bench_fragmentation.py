"""Fragmentation in the gang benchmark, without a cluster: the free whole racks and blocks over
a run's window from its event log (bench.fragmentation), their cells in the report
(bench.gang_report), absent without topology, and fragmentation.png (bench.gang_plots)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from escher_harness.bench import gang_plots, gang_report
from escher_harness.bench.fragmentation import Series, domains, figures, free_series
from escher_harness.bench.trace import Event, Kind
from escher_harness.localcluster.fakenodes import Topology

# Racks of 2 nodes, blocks of 2 racks: 8 nodes are racks 0-3 (nodes 0-1, 2-3, 4-5, 6-7) in
# blocks 0 (nodes 0-3) and 1 (nodes 4-7).
SMALL = Topology(rack_nodes=2, racks_per_block=2, blocks_per_zone=2)
TOTAL = {"rack": 4, "block": 2}


def gang(name: str, submit: float, bound: float, nodes: list[int], freed: float) -> list[Event]:
    """A gang submitted, its members (one a node) bound, Succeeded, deleted, and done."""
    pods = [f"{name}-{i}" for i in range(len(nodes))]
    return [
        Event(submit, Kind.SUBMIT, name, size=len(nodes)),
        *(
            Event(bound, Kind.BOUND, name, p, node=f"node-{n}")
            for p, n in zip(pods, nodes, strict=True)
        ),
        *(Event(freed, Kind.SUCCEEDED, name, p) for p in pods),
        *(Event(freed + 0.5, Kind.UNBOUND, name, p) for p in pods),
        Event(freed + 1, Kind.DONE, name),
    ]


START = [Event(0, Kind.START)]

CASES: list[tuple[str, list[Event], Series, dict[str, float]]] = [
    (
        # each gang in one rack of block 0: block 1 stays whole
        "packed",
        [*START, *gang("g1", 1, 2, [0, 1], 6), *gang("g2", 3, 4, [2, 3], 8)],
        [(1, 4, 2), (2, 3, 1), (4, 2, 1), (6, 3, 1), (8, 4, 2), (9, 4, 2)],
        {"free_racks_min": 2, "free_racks_mean": 3.0, "free_blocks_min": 1},
    ),
    (
        # the same gangs, each over two blocks: no whole domain left while both run
        "spread",
        [*START, *gang("g1", 1, 2, [0, 4], 6), *gang("g2", 3, 4, [2, 6], 8)],
        [
            (1, 4, 2),
            (2, 3, 1),
            (2, 2, 0),
            (4, 1, 0),
            (4, 0, 0),
            (6, 1, 0),
            (6, 2, 0),
            (8, 3, 1),
            (8, 4, 2),
            (9, 4, 2),
        ],
        {"free_racks_min": 0, "free_racks_mean": 2.0, "free_blocks_min": 0},
    ),
    (
        # a placeholder holds until released; a member until Succeeded, and its deletion
        # after that frees nothing twice; deleting a pod never bound frees nothing
        "placeholders and members",
        [
            *START,
            Event(1, Kind.SUBMIT, "g1", size=1),
            Event(2, Kind.HELD, "g1", "g1-p", node="node-0"),
            Event(3, Kind.RELEASED, "g1", "g1-p"),
            Event(3, Kind.BOUND, "g1", "g1-a", node="node-2"),
            Event(3.5, Kind.UNBOUND, "g1", "g1-b"),
            Event(4, Kind.SUCCEEDED, "g1", "g1-a"),
            Event(5, Kind.UNBOUND, "g1", "g1-a"),
            Event(6, Kind.DONE, "g1"),
        ],
        [(1, 4, 2), (2, 3, 1), (3, 4, 2), (3, 3, 1), (4, 4, 2), (6, 4, 2)],
        {"free_racks_min": 3, "free_racks_mean": 3.6, "free_blocks_min": 1},
    ),
    (
        # the window opens at the first submission (times are since START) and closes at
        # the last gang's end: the deletion after a give-up is outside it
        "window",
        [
            Event(10, Kind.START),
            Event(12, Kind.SUBMIT, "g1", size=2),
            Event(13, Kind.BOUND, "g1", "g1-a", node="node-0"),
            Event(15, Kind.TIMEOUT, "g1"),
            Event(16, Kind.UNBOUND, "g1", "g1-a"),
        ],
        [(2, 4, 2), (3, 3, 1), (5, 3, 1)],
        {"free_racks_min": 3, "free_racks_mean": 3.33, "window_s": 3},
    ),
    (
        # no gang ended: the window closes at the log's last event
        "no end",
        [
            *START,
            Event(1, Kind.SUBMIT, "g1", size=1),
            Event(2, Kind.BOUND, "g1", "g1-a", node="node-7"),
            Event(4, Kind.RUNNING, "g1", "g1-a"),
        ],
        [(1, 4, 2), (2, 3, 1), (4, 3, 1)],
        {"free_blocks_min": 1, "free_blocks_mean": 1.33, "free_blocks_mean_pct": 66.7},
    ),
    (
        # a window of no length: the mean is the one value there is
        "an instant",
        [*START, Event(1, Kind.SUBMIT, "g1", size=1), Event(1, Kind.TIMEOUT, "g1")],
        [(1, 4, 2), (1, 4, 2)],
        {"free_racks_mean": 4.0, "free_racks_mean_pct": 100.0, "window_s": 0},
    ),
]


@pytest.mark.parametrize(
    ("events", "series", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_free_whole_domains_over_the_window(
    events: list[Event], series: Series, want: dict[str, float]
) -> None:
    got = free_series(events, SMALL, TOTAL)
    assert got == series
    figs = figures(got, TOTAL)
    assert (figs["racks"], figs["blocks"]) == (4, 2)
    assert {k: figs[k] for k in want} == pytest.approx(want)
    # the shares are of all the level's domains (each figure rounded on its own)
    assert figs["free_racks_min_pct"] == pytest.approx(100 * figs["free_racks_min"] / 4)
    assert figs["free_blocks_mean_pct"] == pytest.approx(
        100 * figs["free_blocks_mean"] / 2, rel=0.01
    )


def test_the_packed_run_keeps_more_whole_domains_than_the_spread_one() -> None:
    packed, spread = (figures(free_series(c[1], SMALL, TOTAL), TOTAL) for c in CASES[:2])
    # packed: blocks 2, 1, 1, 1, 1 over 1, 2, 2, 2, 1 s of 8; spread: 2, 1 s at 2 blocks
    assert (packed["free_blocks_mean"], spread["free_blocks_mean"]) == (1.25, 0.5)
    assert (packed["free_blocks_min_pct"], spread["free_blocks_min_pct"]) == (50.0, 0.0)


def test_without_a_submission_there_is_nothing_to_measure() -> None:
    assert free_series(START, SMALL, TOTAL) == []
    assert free_series([], SMALL, TOTAL) == []
    assert figures([], TOTAL) == {}


@pytest.mark.parametrize(
    ("topology", "nodes", "want"),
    [
        (SMALL, 8, TOTAL),
        (SMALL, 9, {"rack": 5, "block": 3}),  # the last rack and block hold what is left
        (Topology(), 5000, {"rack": 157, "block": 10}),  # the topology preset
        (Topology(), 256, {"rack": 8, "block": 1}),  # its smoke test in docs/gangs.md
    ],
)
def test_the_clusters_domains(topology: Topology, nodes: int, want: dict[str, int]) -> None:
    assert domains(topology, nodes) == want


# --- in the report and the plots --------------------------------------------------------------


def _run(free_blocks_mean: float | None) -> dict[str, Any]:
    """A run's figures; None: a run without topology (no fragmentation key at all)."""
    r: dict[str, Any] = {"gangs_submitted": 4, "gangs_completed": 4, "latencies_ms": [5.0]}
    if free_blocks_mean is not None:
        r["fragmentation"] = {"free_blocks_mean": free_blocks_mean, "free_blocks_mean_pct": 10.0}
        r["free_domains_series"] = [(0.0, 4, 2), (1.0, 3, 1), (2.0, 4, 2)]
    return r


@pytest.mark.parametrize(
    ("runs", "cell"),
    [
        ([_run(1.0), _run(2.5), _run(2.0)], "2.0 [1.0-2.5]"),
        ([_run(0.0)], "0.0"),  # none free is a figure
        ([_run(None), _run(None)], "-"),  # without topology: absent, not zero
    ],
)
def test_the_topology_table_gives_free_blocks_over_repetitions(
    runs: list[dict[str, Any]], cell: str
) -> None:
    results = {"extender": {"scenarios": {"required": {"figures": gang_report.aggregate(runs)}}}}
    table = gang_report.table(results, ["required"], gang_report.TOPOLOGY_TABLE)
    head, _, row = table.splitlines()
    column = [c.strip() for c in head.split("|")].index("free blocks mean")
    assert [c.strip() for c in row.split("|")][column] == cell


@pytest.mark.parametrize(("free", "written"), [(2.0, True), (None, False)])
def test_fragmentation_png_is_drawn_only_with_topology(
    tmp_path: Path, free: float | None, written: bool
) -> None:
    runs = {"required": {"extender": {1: _run(free), 2: _run(free)}, "native": {1: _run(free)}}}
    gang_plots.write(tmp_path, runs, ["required"], ["extender", "native"])
    assert (tmp_path / "fragmentation.png").exists() is written
