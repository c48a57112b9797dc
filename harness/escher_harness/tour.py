"""`escher-extender tour`: a two-minute tour of ephemeral resources on the embedded cluster
(the main job, the gang comparison, is `make demo`).

Brings up the real control plane wired to the extender, creates an ephemeral resource with
the policy API, submits pods that request it, and shows where kube-scheduler put them, why
the rest are pending, and that raising the capacity at runtime lets them in. Called by
the CLI.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from escher_harness import localcluster
from escher_harness.kubeclient import api_client
from escher_harness.workload import Workload, pod_manifest
from extender.esl.client import PolicyClient


def _say(msg: str) -> None:
    print(msg, flush=True)


def _table(rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        _say("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
        if i == 0:
            _say("  " + "  ".join("-" * w for w in widths))


def _cut(text: str, width: int = 90) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def run(dir: Path | None = None, nodes: int = 4, keep: bool = False) -> int:
    root = dir or Path(tempfile.mkdtemp(prefix="escher-tour-"))
    _say(f"== starting the local control plane in {root} (extender mode, {nodes} nodes)")
    info = localcluster.up(
        localcluster.ClusterSpec(dir=root, nodes=nodes, mode="extender"),
        progress=lambda m: _say(f"   {m}"),
    )
    try:
        _say(f"   ready in {info.ready_seconds:.1f}s; extender at {info.extender_url}")
        assert info.extender_url is not None
        policy = PolicyClient(info.extender_url, info.token)
        work = Workload(api_client(info.kubeconfig))
        node = info.nodes[1]

        _say(f"\n== set_resource('accel', capacity=2, node={node!r})")
        res = policy.set_resource("accel", 2, node=node)
        _say(f"   pods now request {res.resource}; durable on the Node: {res.durable}")
        on_node = work.node_resources(node, info.resource_domain + "/")
        _say(f"   {node} status.allocatable: {on_node['allocatable']}")

        names = [f"accel-{i}" for i in range(3)]
        _say(f"\n== creating {len(names)} pods, each with limits {{{res.resource}: 1}}")
        for n in names:
            work.create(pod_manifest(n, limits={res.resource: "1", "cpu": "100m"}))
        placed = work.wait(names, timeout=30, bound=2, settle=2.0)
        _table(
            [("pod", "node", "pending because")]
            + [(p.name, p.node or "-", _cut(p.reason)) for p in placed.values()]
        )

        _say(f"\n== set_resource('accel', capacity=3, node={node!r}): room for the third")
        start = time.monotonic()
        policy.set_resource("accel", 3, node=node)
        placed = work.wait(names, timeout=60)
        _table([("pod", "node")] + [(p.name, p.node or "-") for p in placed.values()])
        _say(f"   all placed {time.monotonic() - start:.2f}s after the resize call began")

        state = policy.cluster_state().nodes[node][res.resource]
        _say(
            f"\n== get_cluster_state()[{node!r}][{res.resource!r}]: capacity {state.capacity},"
            f" allocated {state.allocated}, available {state.available}"
        )
        ok = all(p.node == node for p in placed.values())
        _say("\n" + ("tour OK" if ok else "tour FAILED: not every pod landed on " + node))
        return 0 if ok else 1
    finally:
        if keep:
            _say(f"\ncluster left running: escher-extender cluster down --dir {root}")
        else:
            localcluster.down(root)


def main(dir: Path | None, keep: bool) -> int:
    try:
        return run(dir, keep=keep)
    except localcluster.ClusterError as e:
        print(f"escher-extender tour: {e}", file=sys.stderr)
        return 1
