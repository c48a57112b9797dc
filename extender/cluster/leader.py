"""Leader election over a coordination.k8s.io Lease, as kube-scheduler's own (client-go's).

Replicas compete for one Lease; the holder renews it every retry period. A replica that sees
another holder waits until the lease was not renewed for leaseDuration (by its own clock,
from when it last saw the record change) before it takes it over, with the Lease's
resourceVersion as precondition so two cannot both win.

Fencing: a leader counts itself the leader only until renewDeadline after its last
successful renew (`is_leader()` reads the monotonic clock each time). renewDeadline is below
leaseDuration, so a leader that cannot renew (the API server is away, or the process was
paused) stops writing before another replica may win the lease; a paused process resumed
later finds its time long past and writes nothing. Writes themselves carry preconditions
too (the write-back's resourceVersion, the Binding's UID).

`release()` runs at a graceful stop (SIGTERM: a rollout, a drain): the leader stops counting
itself the leader, then empties the holder (leaseDurationSeconds 1, as client-go's
ReleaseOnCancel), so a follower takes over within a retry period instead of a lease duration.

`check()` runs at start: it fails with a message naming the problem when the service
account may not use Leases, or when the Lease belongs to replicas of another resource domain.
Created and run by extender.service, which is told of every change of leadership.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime

import msgspec

from extender.kube.client import ApiError, KubeAPI

log = logging.getLogger(__name__)

DOMAIN_ANNOTATION = "extender.escher.io/resource-domain"


class LeaderElectionError(Exception):
    """Leader election cannot work as configured; the message says why."""


class _Meta(msgspec.Struct, omit_defaults=True):
    name: str = ""
    namespace: str = ""
    resourceVersion: str = ""
    annotations: dict[str, str] = {}


class _Spec(msgspec.Struct, omit_defaults=True):
    holderIdentity: str = ""
    leaseDurationSeconds: int = 0
    acquireTime: str | None = None
    renewTime: str | None = None
    leaseTransitions: int = 0


class _Lease(msgspec.Struct, omit_defaults=True):
    apiVersion: str = "coordination.k8s.io/v1"
    kind: str = "Lease"
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _Spec = msgspec.field(default_factory=_Spec)


class _Access(msgspec.Struct):
    class _Status(msgspec.Struct):
        allowed: bool = False

    status: _Status = msgspec.field(default_factory=_Status)


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# Looks at the lease per retry period of a follower (the leader renews once per period).
FOLLOWER_LOOKS = 8


class LeaderElector:
    def __init__(
        self,
        api: KubeAPI,
        namespace: str,
        name: str,
        identity: str,
        domain: str,
        lease_duration: float,
        renew_deadline: float,
        retry_period: float,
        on_change: Callable[[bool], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.domain = domain
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_change = on_change
        self.clock = clock
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self._renewed_at: float | None = None  # monotonic, at the start of the last renew
        self._observed: _Spec | None = None
        self._observed_at = 0.0
        self._leading = False
        self.holder = ""  # who holds the lease, as last seen

    def is_leader(self) -> bool:
        at = self._renewed_at
        return at is not None and self.clock() < at + self.renew_deadline

    def renewing(self) -> bool:
        """Leading, and renewed within the last two retry periods: the API server answers.
        A leader past that may still lead for a while (until its renew deadline), but a
        change it takes now may not become durable before it has to step down."""
        at, within = self._renewed_at, min(2 * self.retry_period, self.renew_deadline)
        return at is not None and self.clock() < at + within

    async def check(self) -> None:
        """Fail (LeaderElectionError) unless this replica may use the Lease and the Lease is
        not another domain's."""
        for verb in ("get", "create", "update"):
            body = msgspec.json.encode(
                {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SelfSubjectAccessReview",
                    "spec": {
                        "resourceAttributes": {
                            "group": "coordination.k8s.io",
                            "resource": "leases",
                            "namespace": self.namespace,
                            "name": "" if verb == "create" else self.name,
                            "verb": verb,
                        }
                    },
                }
            )
            reply = await self.api.request(
                "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=body
            )
            if not msgspec.json.decode(reply, type=_Access).status.allowed:
                raise LeaderElectionError(
                    f"leader election is enabled but this service account may not {verb} "
                    f"leases (coordination.k8s.io) in namespace {self.namespace}: grant it "
                    "the RBAC of deploy/base/extender-rbac.yaml"
                )
        try:
            lease = await self._get()
        except ApiError as e:
            if e.status == 404:
                return
            raise
        theirs = lease.metadata.annotations.get(DOMAIN_ANNOTATION)
        if theirs is not None and theirs != self.domain:
            raise LeaderElectionError(
                f"lease {self.namespace}/{self.name} belongs to replicas of resource domain "
                f"{theirs!r}, not {self.domain!r}: every replica must use the same domain "
                "(or give each domain its own lease name)"
            )

    async def run(self) -> None:
        """Try to acquire, then keep renewing, every retry period (until cancelled)."""
        while True:
            started = self.clock()
            try:
                # Bounded as client-go bounds it: a renewal the API server sits on (paused,
                # overloaded) ends by the renew deadline, so a leader that lost its lease
                # says so (and steps down) then, not when the client's timeout ends.
                async with asyncio.timeout(self.renew_deadline):
                    won = await self._try()
            except ApiError as e:
                won = False
                log.warning("leader election: %s", e, extra={"reason": e.reason})
            except TimeoutError:
                won = False
                log.warning(
                    "leader election: the API server did not answer within the renew deadline"
                )
            if won:
                self._renewed_at = started
            self._settle()
            await asyncio.sleep(self.next_try())

    def next_try(self) -> float:
        """Seconds until the next attempt. The leader renews every retry period. A follower
        looks FOLLOWER_LOOKS times as often, and sooner still when the lease it watches
        expires sooner: it times the lease from when it saw the last renewal, so how late it
        sees one is added to every failover (up to a retry period at one look per period,
        issue 31; a quarter of a second at eight, issue 58: a GET of one small object)."""
        spec = self._observed
        if spec is None or spec.holderIdentity in ("", self.identity):
            return self.retry_period
        poll = self.retry_period / FOLLOWER_LOOKS
        expires = self._observed_at + (spec.leaseDurationSeconds or self.lease_duration)
        left = expires - self.clock()
        # Expired already: the attempt just made failed (it would have won): poll as usual.
        return left if 0 < left < poll else poll

    def _settle(self) -> None:
        leading = self.is_leader()
        if leading != self._leading:
            self._leading = leading
            log.info(
                "leadership changed",
                extra={"leader": leading, "identity": self.identity, "lease": self.path},
            )
            self.on_change(leading)

    async def release(self) -> bool:
        """Give the lease up if this replica holds it; True when it was given up. Fenced
        first: nothing is written as the leader from here on."""
        self._renewed_at = None
        self._settle()
        try:
            lease = await self._get()
            if lease.spec.holderIdentity != self.identity:
                return False
            stamp = _now()
            lease.spec = _Spec(
                leaseDurationSeconds=1,
                acquireTime=lease.spec.acquireTime,
                renewTime=stamp,
                leaseTransitions=lease.spec.leaseTransitions,
            )
            # The resourceVersion read is the precondition: a lease another replica has
            # taken since is not emptied.
            await self.api.request("PUT", self.path, body=msgspec.json.encode(lease))
        except ApiError as e:
            log.warning("leader election: releasing the lease: %s", e, extra={"reason": e.reason})
            return False
        self.holder = ""
        log.info("lease released", extra={"identity": self.identity, "lease": self.path})
        return True

    async def _get(self) -> _Lease:
        return msgspec.json.decode(await self.api.request("GET", self.path), type=_Lease)

    async def _try(self) -> bool:
        now = self.clock()
        try:
            lease = await self._get()
        except ApiError as e:
            if e.status != 404:
                raise
            return await self._create()
        spec = lease.spec
        self.holder = spec.holderIdentity
        if spec != self._observed:
            self._observed, self._observed_at = spec, now
        mine = spec.holderIdentity == self.identity
        expired = self._observed_at + (spec.leaseDurationSeconds or self.lease_duration) <= now
        if spec.holderIdentity and not mine and not expired:
            return False
        stamp = _now()
        new = _Spec(
            holderIdentity=self.identity,
            leaseDurationSeconds=round(self.lease_duration),
            acquireTime=spec.acquireTime if mine else stamp,
            renewTime=stamp,
            leaseTransitions=spec.leaseTransitions + (0 if mine else 1),
        )
        meta = lease.metadata
        annotations = dict(meta.annotations)
        annotations[DOMAIN_ANNOTATION] = self.domain
        body = _Lease(
            metadata=_Meta(
                name=self.name,
                namespace=self.namespace,
                resourceVersion=meta.resourceVersion,  # precondition: nobody wrote since
                annotations=annotations,
            ),
            spec=new,
        )
        try:
            await self.api.request("PUT", self.path, body=msgspec.json.encode(body))
        except ApiError as e:
            if e.status == 409:
                return False  # another replica wrote first
            raise
        self._observed, self._observed_at, self.holder = new, now, self.identity
        return True

    async def _create(self) -> bool:
        stamp = _now()
        body = _Lease(
            metadata=_Meta(
                name=self.name,
                namespace=self.namespace,
                annotations={DOMAIN_ANNOTATION: self.domain},
            ),
            spec=_Spec(
                holderIdentity=self.identity,
                leaseDurationSeconds=round(self.lease_duration),
                acquireTime=stamp,
                renewTime=stamp,
            ),
        )
        path = f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"
        try:
            await self.api.request("POST", path, body=msgspec.json.encode(body))
        except ApiError as e:
            if e.status == 409:
                return False
            raise
        self.holder = self.identity
        return True
