"""The PodGroups users already declare gangs with, listed and watched into the declarations index.

Two informers (extender.kube.informer), one per kind: the native
`scheduling.k8s.io/v1beta1` PodGroup and scheduler-plugins' `scheduling.x-k8s.io/v1alpha1`
PodGroup CRD. Each object is decoded to the few fields a gang reads and put in the index
(extender.gang.declarations.Declarations), which hands the pods naming a changed group back
to the gang manager.

Either API may not be served: the native one needs kube-apiserver's GenericWorkload gate
and runtime config (off by default in 1.37), the CRD must be installed. A kind whose list
fails (404 not served, 403 no RBAC, anything else) is logged once at info, has no
declarations, and is listed again every `retry_seconds`, so an API enabled or a CRD installed
later is picked up without a restart; it never fails the service's start-up. Built by
extender.gang.kube.build in the extender mode; extender.service syncs it before reporting
ready and runs it.
"""

from __future__ import annotations

import asyncio
import logging

from msgspec import Raw, Struct, field

from extender.core.objects import ObjectMeta, present
from extender.gang.declarations import Declarations, GroupDeclaration, GroupKind, GroupRef
from extender.kube.client import ApiError, KubeAPI
from extender.kube.informer import Handler, Informer
from extender.kube.tasks import run_together
from extender.metrics import Metrics

log = logging.getLogger(__name__)

PATHS = {
    GroupKind.NATIVE: "/apis/scheduling.k8s.io/v1beta1/podgroups",
    GroupKind.COSCHEDULING: "/apis/scheduling.x-k8s.io/v1alpha1/podgroups",
}
# How long a kind whose API is not served waits before it is listed again.
RETRY_SECONDS = 60.0


class _Object(Struct, rename="camel", frozen=True, gc=False):
    """Kubernetes JSON: camelCase keys; unknown keys are skipped."""


# ---- scheduling.k8s.io/v1beta1 (k8s.io/api/scheduling/v1beta1/types.go) --------------------


class _Gang(_Object, frozen=True):
    min_count: int = 0


class _Policy(_Object, frozen=True):
    basic: Raw = field(default_factory=Raw)
    gang: _Gang | None = None


class _Topology(_Object, frozen=True):
    key: str = ""


class _Constraints(_Object, frozen=True):
    topology: list[_Topology] = []


class _NativeSpec(_Object, frozen=True):
    scheduling_policy: _Policy = field(default_factory=_Policy)
    scheduling_constraints: _Constraints | None = None


class NativePodGroup(_Object, frozen=True):
    metadata: ObjectMeta = field(default_factory=ObjectMeta)
    spec: _NativeSpec = field(default_factory=_NativeSpec)

    def declaration(self) -> GroupDeclaration:
        policy = self.spec.scheduling_policy
        # Exactly one policy is set (the API server validates it); `basic` is no gang.
        gang = policy.gang if policy.gang is not None or not present(policy.basic) else None
        constraints = self.spec.scheduling_constraints
        topology = constraints.topology if constraints is not None else []
        return GroupDeclaration(
            min_members=gang.min_count if gang is not None else None,
            # At most one constraint in 1.37 (+k8s:maxItems=1).
            required_key=topology[0].key if topology and topology[0].key else None,
        )


# ---- scheduling.x-k8s.io/v1alpha1 (scheduler-plugins apis/scheduling/v1alpha1) -------------


class _CoschedulingSpec(_Object, frozen=True):
    min_member: int = 0
    schedule_timeout_seconds: int | None = None


class CoschedulingPodGroup(_Object, frozen=True):
    metadata: ObjectMeta = field(default_factory=ObjectMeta)
    spec: _CoschedulingSpec = field(default_factory=_CoschedulingSpec)

    def declaration(self) -> GroupDeclaration:
        t = self.spec.schedule_timeout_seconds
        return GroupDeclaration(self.spec.min_member, None if t is None else float(t))


PodGroup = NativePodGroup | CoschedulingPodGroup


class _Kind:
    """One kind's informer, and whether its API was served at the last list."""

    def __init__(
        self,
        api: KubeAPI,
        kind: GroupKind,
        struct: type[NativePodGroup] | type[CoschedulingPodGroup],
        index: Declarations,
        metrics: Metrics,
    ) -> None:
        self.kind = kind
        self.index = index
        self.served: bool | None = None  # None: not listed yet
        self.informer: Informer[PodGroup] = Informer(
            api,
            kind.value,
            PATHS[kind],
            struct,  # each kind decodes its own struct
            Handler(self._event, self._listed, _key),
            metrics,
        )

    def _ref(self, obj: PodGroup) -> GroupRef:
        return GroupRef(self.kind, obj.metadata.namespace or "default", obj.metadata.name)

    def _event(self, change: str, obj: PodGroup) -> None:
        if change == "DELETED":
            self.index.remove(self._ref(obj))
        else:
            self.index.put(self._ref(obj), obj.declaration())

    def _listed(self, keys: set[str]) -> None:
        refs = []
        for k in keys:
            namespace, _, name = k.partition("/")
            refs.append(GroupRef(self.kind, namespace, name))
        self.index.listed(self.kind, refs)

    async def sync(self) -> bool:
        """List the kind; False (and no declarations of it) when that fails."""
        try:
            await self.informer.sync()
        except ApiError as e:
            if self.served is not False:  # said once, not at every retry
                log.info(
                    "gang declarations of this kind are not read: its API is not served or "
                    "not readable; listed again later",
                    extra={"kind": self.kind.value, "status": e.status, "error": str(e)},
                )
            self.served = False
            self.index.replace(self.kind, {})
            return False
        if self.served is not True:
            log.info("gang declarations read", extra={"kind": self.kind.value})
        self.served = True
        return True

    async def run(self, retry_seconds: float) -> None:
        if self.served is None:
            await self.sync()
        while not self.served:
            await asyncio.sleep(retry_seconds)
            await self.sync()
        await self.informer.run()


def _key(obj: PodGroup) -> str:
    return f"{obj.metadata.namespace or 'default'}/{obj.metadata.name}"


class PodGroups:
    """Both kinds' informers, feeding one declarations index."""

    def __init__(
        self,
        api: KubeAPI,
        index: Declarations,
        metrics: Metrics,
        retry_seconds: float = RETRY_SECONDS,
    ) -> None:
        self.index = index
        self.retry_seconds = retry_seconds
        self.kinds = (
            _Kind(api, GroupKind.NATIVE, NativePodGroup, index, metrics),
            _Kind(api, GroupKind.COSCHEDULING, CoschedulingPodGroup, index, metrics),
        )

    async def sync(self) -> None:
        """List both kinds; never raises for a kind that is not served."""
        for k in self.kinds:
            await k.sync()

    async def run(self) -> None:
        """Watch the kinds that were listed, list again the others now and then; for ever."""
        await run_together((k.run(self.retry_seconds), f"watch-{k.kind.value}") for k in self.kinds)
