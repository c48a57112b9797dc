"""The ephemeral resources the paper experiments create and remove, through the service's
HTTP policy API (PolicyClient.set_resource, one call per resource, as ESCHER's set_resource):
`spread` puts each on one node (`placement`: round-robin over a seeded order of the nodes,
the paper's "an equal number of resources on each node"); `on_nodes` puts each on the same
first nodes; `remove` deletes them (forced: pods may still hold units). `clients` calls run at once,
each on a client of its own thread. Used by e7_creation, e8_makespan and e9_requested."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from escher_harness.bench.paper.context import Context
from escher_harness.bench.throughput import writeback_idle
from extender.esl.client import PolicyAPIError, PolicyClient

Call = Callable[[PolicyClient, str], object]


def _calls(ctx: Context, names: Sequence[str], clients: int, call: Call) -> list[float]:
    """Each name's call, `clients` at a time; when each returned (time.monotonic), in order."""
    local = threading.local()
    opened: list[PolicyClient] = []
    lock = threading.Lock()

    def one(name: str) -> float:
        if not hasattr(local, "policy"):
            assert ctx.info.extender_url is not None, "the paper experiments need the policy API"
            local.policy = PolicyClient(ctx.info.extender_url, ctx.info.token, timeout=120)
            with lock:
                opened.append(local.policy)
        call(local.policy, name)
        return time.monotonic()

    try:
        with ThreadPoolExecutor(clients) as pool:
            return list(pool.map(one, names))
    finally:
        for p in opened:
            p.close()


def placement(ctx: Context, names: Sequence[str]) -> dict[str, str]:
    """Each of `names`' node: round-robin over a seeded order of the nodes."""
    nodes = list(ctx.info.nodes)
    ctx.rng.shuffle(nodes)
    return {n: nodes[i % len(nodes)] for i, n in enumerate(names)}


def spread(ctx: Context, where: dict[str, str], capacity: int, clients: int) -> list[float]:
    """Set each resource of `where` on its node with `capacity` units; when each call
    returned (the service answers once the change is durable on the Node objects)."""
    names = list(where)
    return _calls(ctx, names, clients, lambda p, n: p.set_resource(n, capacity, node=where[n]))


def on_nodes(ctx: Context, names: Sequence[str], capacity: int, nodes: int, clients: int) -> None:
    """Set each of `names` on the same `nodes` nodes (the first by name) with `capacity`."""
    _calls(ctx, names, clients, lambda p, n: p.set_resource(n, capacity, num_nodes=nodes))


def remove(ctx: Context, names: Sequence[str], clients: int) -> None:
    """Delete each of `names` everywhere, and wait until the service has written it all."""

    def delete(p: PolicyClient, name: str) -> None:
        try:
            p.delete_resource(name, force=True)
        except PolicyAPIError as e:
            if e.status != 404:  # never created (a failed run): nothing to remove
                raise

    _calls(ctx, names, clients, delete)
    writeback_idle(ctx.info)
