"""Write-back: ephemeral resources on the Node objects, equal to the ledger (pure and
extender modes).

Writes each node's capacities (NodeView.ephemeral) to its `status.capacity` and
`status.allocatable` (no kubelet copies one into the other for these names). A capacity
lowered below what pods bound meanwhile hold (kube-scheduler binds the pods that need no
exchange itself, against the capacity it last saw) is written as it is, not raised to cover
them: NodeResourcesFit then sees no room on that node, and none as they leave, until they are
below it. Raised to what they held, each pod leaving freed a unit that kube-scheduler gave a
waiting pod before the lowered figure reached it, and the node stayed above the capacity
accepted for as long as pods waited (tests/e2e/test_split.py). A JSON merge patch of the status
subresource that names only the domain's keys (null deletes one), so other writers' extended
resources are never touched.

Every patch carries the node's resourceVersion as a precondition (optimistic concurrency):
it applies only to the node state it was computed from. A patch based on a stale view, or
one a deposed leader still had in flight after another replica won the lease and wrote,
fails with 409 Conflict instead of overwriting; the node is then read again and the patch
recomputed (and sent only while this replica may still write). Coalescing, retries,
durability and leadership are the engine's (extender.writeback.nodewriter).

Created by extender.cluster.build; the cluster view tells it what each node shows
(node_seen).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from extender.core import quantity
from extender.core.ledger import NodeView
from extender.kube.client import ApiError, merge_patch
from extender.kube.handle import Handle
from extender.writeback.args import WriteBackArgs
from extender.writeback.nodewriter import NodeWriter

_CONFLICT_RETRIES = 3
# What a node shows of the extender's resources: capacity and allocatable, each as
# {resource: units}, with None for a value that is not a whole number the extender wrote.
# The cluster view (extender.cluster.view) reads it from each node and hands it here.
Owned = Mapping[str, int | None]


class _Seen(msgspec.Struct, gc=False):
    """What the node showed last: its resourceVersion and the domain's keys there.

    Not tracked by the garbage collector (its dicts hold strings and numbers only): one per
    node, replaced on each of its updates, so at 5,000 nodes they were the old generation's
    most common objects, walked by every full collection and bringing the next one sooner."""

    version: str
    capacity: Owned
    allocatable: Owned
    # A write failed since: read the node again before the next patch (the values are
    # still the last known ones, which a replica that steps down adopts).
    stale: bool = False


class _NodeStatus(msgspec.Struct):
    class _Meta(msgspec.Struct):
        resourceVersion: str = ""

    class _Status(msgspec.Struct):
        capacity: dict[str, str] = {}
        allocatable: dict[str, str] = {}

    metadata: _Meta = msgspec.field(default_factory=_Meta)
    status: _Status = msgspec.field(default_factory=_Status)


class WriteBack(NodeWriter):
    def __init__(
        self,
        handle: Handle,
        args: WriteBackArgs,
        advertised: Mapping[str, int] | None = None,
    ) -> None:
        super().__init__(handle.ledger, args, handle.metrics, handle.may_write)
        self._api = handle.api
        self._prefix = handle.ledger.prefix
        # Resources outside the domain that every node carries, at a fixed value: the
        # markers in extender mode (extender.core.pod.MARKER_CAPACITY says why).
        self._advertised = dict(advertised or {})
        self._seen: dict[str, _Seen] = {}
        self._decode = msgspec.json.Decoder(_NodeStatus)

    def node_seen(self, node: str, version: str, capacity: Owned, allocatable: Owned) -> None:
        """What the cluster view saw on a node; a difference from the ledger is re-asserted."""
        self._seen[node] = _Seen(version, dict(capacity), dict(allocatable))
        view = self._ledger.node(node)
        if view is None or not self._may_write():
            return
        want = self._desired(view)
        if capacity != want or allocatable != want:
            self.drifted(node)

    # ---- NodeWriter ------------------------------------------------------------------------

    def _last_known(self, node: str) -> Mapping[str, int] | None:
        seen = self._seen.get(node)
        if seen is None:
            return None
        return {
            k: v for k, v in seen.allocatable.items() if v is not None and k not in self._advertised
        }

    def _forget(self, node: str) -> None:
        self._seen.pop(node, None)

    def _stale(self, node: str) -> None:
        seen = self._seen.get(node)
        if seen is not None:
            seen.stale = True  # look before the next try

    async def _converge(self, node: str) -> bool:
        wrote = False
        for _ in range(_CONFLICT_RETRIES + 1):
            view = self._ledger.node(node)
            if view is None:
                return wrote  # gone from the ledger: nothing to write
            desired = self._desired(view)
            seen = self._seen.get(node)
            if seen is None or seen.stale:
                seen = await self._read(node)
            body = patch_body(seen, desired)
            if body is None:
                return wrote
            self._check_leading()
            payload, content_type = merge_patch(body)
            try:
                reply = await self._api.request(
                    "PATCH",
                    f"/api/v1/nodes/{node}/status",
                    body=payload,
                    content_type=content_type,
                    what=f"patching node {node}",
                )
            except ApiError as e:
                if e.status != 409:
                    raise
                self._seen[node] = await self._read(node)  # stale: look, and try again
                continue
            self._seen[node] = self._parse(reply)
            wrote = True
        return wrote

    def _desired(self, view: NodeView) -> dict[str, int]:
        return {**view.ephemeral, **self._advertised}

    async def _read(self, node: str) -> _Seen:
        reply = await self._api.request(
            "GET", f"/api/v1/nodes/{node}/status", what=f"reading node {node}"
        )
        return self._parse(reply)

    def _parse(self, reply: bytes) -> _Seen:
        status = self._decode.decode(reply)
        return _Seen(
            status.metadata.resourceVersion,
            _owned(status.status.capacity, self._prefix, self._advertised),
            _owned(status.status.allocatable, self._prefix, self._advertised),
        )


def patch_body(seen: _Seen, desired: Mapping[str, int]) -> dict[str, object] | None:
    """The merge patch taking the node from what it showed to `desired`, with its
    resourceVersion as the precondition, or None when there is nothing to change.

    Names only the keys that differ, in both capacity and allocatable; null deletes a key.
    """
    diffs: dict[str, dict[str, str | None]] = {}
    for section, now in (("capacity", seen.capacity), ("allocatable", seen.allocatable)):
        diff: dict[str, str | None] = {k: str(v) for k, v in desired.items() if now.get(k) != v}
        diff.update({k: None for k in now if k not in desired})
        if diff:
            diffs[section] = diff
    if not diffs:
        return None
    # Both sections get the same keys: a node's capacity and allocatable stay equal.
    keys = {k for d in diffs.values() for k in d}
    merged = {k: (str(desired[k]) if k in desired else None) for k in keys}
    return {
        "metadata": {"resourceVersion": seen.version},
        "status": {"capacity": merged, "allocatable": dict(merged)},
    }


def _owned(
    resources: Mapping[str, str], prefix: str, advertised: Mapping[str, int]
) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for k, text in resources.items():
        if k.startswith(prefix) or k in advertised:
            try:
                out[k] = quantity.capacity(text, field=k)
            except quantity.InvalidQuantity:
                out[k] = None  # not a value we would write: rewrite it
    return out
