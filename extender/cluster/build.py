"""The Kubernetes side of the service, built for its mode: the composition root of every
feature's Kubernetes side, as one typed bundle.

Called by the service (extender.service) in the modes that talk to the API (settings.kube).
It makes the Handle the features share (the client, the ledger, the metrics, may_write) and
calls each feature's own build with its args: every such mode gets the cluster view, the
write-back (Node status, or in mode dra the ResourceSlice publisher), the policies' object
store (settings.policy.objects) and, with leader election, the elector; the extender mode
also the scheduling verbs' parts (binder, waker), the gang's (lifter, nominator, gate
switch, PodGroup informers) and the writer of preferred nodes. The service wires their
callbacks (may_write, leadership), runs them and closes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from extender.cluster.leader import LeaderElector, default_identity
from extender.cluster.view import ClusterView
from extender.core.events import PodEvents
from extender.core.pod import MARKER_CAPACITY
from extender.dra.slices import SlicePublisher
from extender.esl.registry import Instances
from extender.gang.declarations import Declarations
from extender.gang.kube import build as gang
from extender.gang.kube.build import GangParts
from extender.kube.client import KubeAPI
from extender.kube.handle import Handle
from extender.kube.nominator import Nominator
from extender.policies.kube import build as policies
from extender.policies.kube.esls import BackendFactory
from extender.policies.kube.objectstore import ObjectStore
from extender.policies.store import WaitDurable
from extender.scheduling.kube import build as scheduling
from extender.scheduling.kube.build import SchedulingParts
from extender.settings import Settings
from extender.writeback.nodes import WriteBack
from extender.writeback.nodewriter import NodeWriter


@dataclass(frozen=True, slots=True)
class KubeParts:
    api: KubeAPI
    view: ClusterView
    writeback: NodeWriter  # Node status (WriteBack), or in mode dra ResourceSlices
    elector: LeaderElector | None  # leader_election.leader_elect
    store: ObjectStore | None  # policy.objects
    scheduling: SchedulingParts | None  # the extender mode, and the gang's below
    gang: GangParts | None
    preferences: Nominator | None  # the extender mode with preference.nominate

    async def aclose(self) -> None:
        """Close the parts that write on their own (the API client stays open)."""
        for parts in (self.scheduling, self.gang, self.preferences):
            if parts is not None:
                await parts.aclose()


def client(s: Settings) -> KubeAPI:
    return KubeAPI(s.kubeconfig, in_cluster=s.in_cluster, qps=s.kube_qps, burst=s.kube_burst)


def build(
    s: Settings,
    handle: Handle,
    events: PodEvents,
    on_leadership: Callable[[bool], None],
    esls: Instances,
    esl_backend: BackendFactory,
    wait: WaitDurable,
    declarations: Declarations,
) -> KubeParts:
    """The parts `s.mode` needs, each built by its feature from its args."""
    h = handle
    store = policies.build(s.policy, h, esls, esl_backend, wait)
    writeback, where = _writeback(s, h)
    view = ClusterView(
        h.api,
        h.ledger,
        h.keys,
        events,
        h.metrics,
        adopt=lambda: not h.may_write(),  # a follower mirrors the cluster; the leader writes
        # A node recreated under its name: the objects naming it are applied to it again.
        on_node_added=store.node_added if store is not None else None,
        **where,
    )
    return KubeParts(
        api=h.api,
        view=view,
        writeback=writeback,
        elector=_elector(s, h, on_leadership),
        store=store,
        scheduling=(scheduling.build(h, s.scheduling) if s.binds else None),
        gang=gang.build(s.gang, h, declarations) if s.binds else None,
        preferences=_preferences(s, h),
    )


def _preferences(s: Settings, h: Handle) -> Nominator | None:
    """The writer of preferred nodes (extender.preference.nominations decides them)."""
    p = s.preference
    if not (s.binds and p.nominate):
        return None
    return Nominator(h.api, h.metrics.preference_nominations, h.may_write, p.nominate_delay_seconds)


def _writeback(s: Settings, h: Handle) -> tuple[NodeWriter, dict[str, Any]]:
    """The write-back the mode needs, and how the cluster view treats what nodes show of
    the domain."""
    if s.mode == "dra":
        publisher = SlicePublisher(h, s.dra, s.writeback)
        h.ledger.guard = publisher.guard
        return publisher, {"node_resources": False, "on_node_gone": publisher.drifted}
    # The markers, on every node while this service answers kube-scheduler's verbs.
    advertised = dict.fromkeys(h.keys.markers, MARKER_CAPACITY) if s.binds else {}
    status = WriteBack(h, s.writeback, advertised)
    return status, {"on_node_seen": status.node_seen, "advertised": advertised}


def _elector(s: Settings, h: Handle, on_leadership: Callable[[bool], None]) -> LeaderElector | None:
    le = s.leader_election
    if not le.leader_elect:
        return None
    return LeaderElector(
        h.api,
        le.lease_namespace,
        le.lease_name,
        le.identity or default_identity(),
        h.domain,
        le.lease_duration_seconds,
        le.renew_deadline_seconds,
        le.retry_period_seconds,
        on_leadership,
    )
