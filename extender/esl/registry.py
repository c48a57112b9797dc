"""The explicit registry of ESLs (kind -> class) and the store of instances the service runs.

REGISTRY is to ESLs what extender.scheduling.registry is to plugins: the /v1/esl endpoints and
compositions find an ESL by its NAME here. To add an ESL: write a module in this package
with a NAME and a class following extender.esl.base.ESL, and list it below. `build` makes an
instance from {kind, params}, compositions' parts included (the compose module itself knows
no other ESL).

Instances is the service's store of ESLs created over HTTP (extender.http.esl): one lock per
instance serialises its calls, each has its own LedgerBackend so whether its changes were
confirmed on the nodes is known per call, and there are at most `limit` of them. Created by
extender.service, which runs `run` in a thread: every STEP_SECONDS the instances' dynamic
policies advance without a client calling POST /v1/esl/{id}/step.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.core.ledger import NodeView
from extender.esl import (
    antiaffinity,
    binpack,
    colocation,
    compose,
    fairshare,
    gang,
    loadbalance,
    locality,
    queues,
    sequencing,
    soft,
)
from extender.esl.backends import LedgerBackend
from extender.esl.base import ESL, Backend, Change, Dynamic, Signalled, parse_params
from extender.esl.errors import (
    InstanceExists,
    InstanceNotFound,
    InvalidParameters,
    TooMany,
    UnknownKind,
    Unsupported,
)

log = logging.getLogger(__name__)

REGISTRY: dict[str, type[ESL]] = {
    colocation.NAME: colocation.Colocation,
    antiaffinity.NAME: antiaffinity.AntiAffinity,
    loadbalance.NAME: loadbalance.LoadBalance,
    locality.NAME: locality.Locality,
    binpack.NAME: binpack.BinPack,
    sequencing.NAME: sequencing.Sequencing,
    queues.NAME: queues.Queues,
    fairshare.NAME: fairshare.FairShare,
    soft.NAME: soft.Soft,
    compose.NAME: compose.Compose,
    gang.NAME: gang.GangESL,
}

STEP_SECONDS = 1.0


def build(kind: str, data: Any, backend: Backend) -> ESL:
    """An ESL instance of `kind` from raw parameters (a composition's parts too), or
    UnknownKind / InvalidParameters naming the field."""
    cls = REGISTRY.get(kind)
    if cls is None:
        raise UnknownKind(f"unknown ESL kind {kind[:64]!r}; one of {', '.join(REGISTRY)}", "kind")
    params = parse_params(cls.Params, data)
    if cls is not compose.Compose:
        return cls(backend, params)
    assert isinstance(params, compose.ComposeParams)
    parts: list[ESL] = []
    for i, part in enumerate(params.parts):
        if part.kind == compose.NAME or part.kind not in REGISTRY:
            kinds = ", ".join(k for k in REGISTRY if k != compose.NAME)
            raise InvalidParameters(
                f"parts.{i}.kind: {part.kind[:64]!r} is not an ESL to compose ({kinds})",
                f"parts.{i}.kind",
            )
        try:
            parts.append(build(part.kind, part.params, backend))
        except InvalidParameters as e:
            # A rule over the whole part (no field of its own) names the part's params.
            where = f"parts.{i}.params" + (f".{e.field}" if e.field else "")
            message = str(e).removeprefix(f"{e.field}: ") if e.field else str(e)
            raise InvalidParameters(f"{where}: {message}", where) from e
    return compose.Compose(backend, params, parts=parts)


@dataclass
class Instance:
    id: str
    kind: str
    esl: ESL
    backend: LedgerBackend
    created: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    steps: int = 0
    last_changes: list[Change] = field(default_factory=list)


@dataclass(frozen=True)
class Applied:
    """What a call changed: the instance, whether every change it made was confirmed on the
    nodes (read under the instance's lock, so the service's own steps cannot reset it
    between the change and the reply), and for a delete the resources removed."""

    instance: Instance
    durable: bool
    removed: tuple[str, ...] = ()


class Instances:
    """`backend` makes each instance's LedgerBackend; `on_change(instance)` is told after
    every call that may have changed it (the object store writes its status)."""

    def __init__(
        self,
        backend: Callable[[], LedgerBackend],
        limit: int = 1000,
        on_change: Callable[[Instance], None] | None = None,
    ) -> None:
        self._backend = backend
        self.limit = limit
        self.on_change = on_change
        self._lock = threading.Lock()
        self._items: dict[str, Instance] = {}

    def __len__(self) -> int:
        return len(self._items)

    def create(
        self,
        kind: str,
        body: Any,
        backend: LedgerBackend | None = None,
        state: Mapping[str, Any] | None = None,
    ) -> Applied:
        """Validate, construct and apply; nothing is left behind when any of it fails.

        With `state` (what Instance.esl.state() gave, kept in the ESL object's status), the
        instance resumes: its resources are found where the ledger says they are, and apply
        (idempotent) completes what a previous leader left undone.
        """
        backend = backend or self._backend()
        esl = build(kind, body, backend)
        iid = f"{kind}-{esl.params.name}"
        inst = Instance(iid, kind, esl, backend, time.time())
        if state is not None:
            nodes = backend.ledger.snapshot().nodes
            esl.restore(state, lambda short: _where(nodes, f"{backend.domain}/{short}"))
        with self._lock:
            if iid in self._items:
                raise InstanceExists(
                    f"ESL {iid} exists; delete it first or choose another name", "name"
                )
            if len(self._items) >= self.limit:
                raise TooMany(f"the service runs {self.limit} ESL instances, its limit", "kind")
            self._items[iid] = inst  # reserved now: a concurrent create of it is refused
        try:
            with inst.lock:
                inst.esl.apply()
                applied = Applied(inst, backend.durable)
        except BaseException:
            with self._lock:
                del self._items[iid]
            if state is None:  # a resumed instance's resources stay for the next try
                inst.esl.teardown()
            raise
        self._changed(inst)
        return applied

    def _changed(self, inst: Instance) -> None:
        if self.on_change is not None:
            self.on_change(inst)

    def forget(self) -> int:
        """Drop every instance without touching its resources (a replica that stepped down:
        the next leader resumes them from their objects); returns how many."""
        with self._lock:
            n = len(self._items)
            self._items.clear()
        return n

    def get(self, iid: str) -> Instance:
        with self._lock:
            inst = self._items.get(iid)
        if inst is None:
            raise InstanceNotFound(f"no ESL instance {iid[:64]!r}", "id")
        return inst

    def all(self) -> list[Instance]:
        with self._lock:
            return list(self._items.values())

    def step(self, iid: str, backlog: Mapping[str, int] | None = None) -> Applied:
        inst = self.get(iid)
        esl = inst.esl
        if not isinstance(esl, Dynamic):
            raise Unsupported(f"{inst.kind} does not change over time: it has no step", "id")
        with inst.lock:
            inst.backend.begin()
            if backlog is not None:
                report = getattr(esl, "report", None)
                if report is None:
                    raise InvalidParameters(f"{inst.kind} takes no backlog", "backlog")
                report(backlog)
            inst.last_changes = esl.step()
            inst.steps += 1
            applied = Applied(inst, inst.backend.durable)
        if inst.last_changes or backlog is not None:
            self._changed(inst)
        return applied

    def signal(self, iid: str, key: str) -> Applied:
        inst = self.get(iid)
        esl = inst.esl
        if not isinstance(esl, Signalled):
            raise Unsupported(f"{inst.kind} takes no signals", "id")
        with inst.lock:
            inst.backend.begin()
            inst.last_changes = esl.signal(key)
            applied = Applied(inst, inst.backend.durable)
        self._changed(inst)
        return applied

    def delete(self, iid: str) -> Applied:
        """Tear down; durable once the resources it removed are gone from the ledger and
        the nodes. The instance is forgotten only once its teardown went through (a refused
        one can be retried)."""
        inst = self.get(iid)
        with inst.lock:
            inst.backend.begin()
            removed = inst.esl.resources()
            inst.esl.teardown()
            ledger = inst.backend.ledger
            durable = inst.backend.durable and not any(ledger.has_resource(r) for r in removed)
        with self._lock:
            self._items.pop(iid, None)
        return Applied(inst, durable, tuple(removed))

    def step_all(self) -> None:
        """One step of every dynamic instance (the service's loop); errors are logged, the
        next round tries again."""
        for inst in self.all():
            if not isinstance(inst.esl, Dynamic):
                continue
            try:
                self.step(inst.id)
            except InstanceNotFound:
                continue  # deleted meanwhile
            except Exception as e:
                log.warning("ESL step failed", extra={"esl": inst.id, "error": str(e)})

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(STEP_SECONDS):
            self.step_all()


def _where(nodes: Mapping[str, NodeView], full: str) -> dict[str, int]:
    """Where the ledger has `full`, {node: capacity}."""
    return {n: v.ephemeral[full] for n, v in nodes.items() if full in v.ephemeral}
