"""The Kubernetes side of the service, built for its mode: one typed bundle of adapters.

Called by the composition root (extender.service) in the modes that talk to the API
(settings.kube): pure gets the cluster view, the write-back and, with leader election, the
elector; dra the same, with the ResourceSlice publisher as the write-back; the extender mode
also the binder, the gate lifter, the nominator, the waker of pods turned away, the PodGroup
informers that fill the gang declarations index and, when configured, the adaptive gang
gate's switch; with policy_objects, the object store that keeps policies as EphemeralResource
and ESL objects. The service wires their callbacks (may_write, leadership), runs them and
closes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from extender.cluster.leader import LeaderElector, default_identity
from extender.cluster.view import ClusterView
from extender.core.events import PodEvents
from extender.core.ledger import Ledger
from extender.core.pod import MARKER_CAPACITY, Keys
from extender.dra.slices import SlicePublisher
from extender.esl.registry import Instances
from extender.gang.declarations import Declarations
from extender.gang.kube.gateswitch import GateSwitch
from extender.gang.kube.lifter import Lifter
from extender.gang.kube.nominator import Nominator
from extender.gang.kube.podgroups import PodGroups
from extender.kube.client import KubeAPI
from extender.metrics import Metrics
from extender.policies.kube.esls import BackendFactory
from extender.policies.kube.objectstore import ObjectStore
from extender.policies.store import WaitDurable
from extender.scheduling.kube.binder import Binder
from extender.scheduling.kube.waker import Waker
from extender.settings import Settings
from extender.writeback.nodes import WriteBack
from extender.writeback.nodewriter import NodeWriter


@dataclass(frozen=True, slots=True)
class KubeParts:
    api: KubeAPI
    view: ClusterView
    writeback: NodeWriter  # Node status (WriteBack), or in mode dra ResourceSlices
    elector: LeaderElector | None  # leader_elect
    binder: Binder | None  # the extender mode, and the three below
    lifter: Lifter | None
    nominator: Nominator | None
    waker: Waker | None  # requeue_window_seconds > 0
    switch: GateSwitch | None  # gang_gate_switch set
    store: ObjectStore | None  # policy_objects
    podgroups: PodGroups | None  # the extender mode: gangs declared as PodGroups


def build(
    s: Settings,
    ledger: Ledger,
    keys: Keys,
    events: PodEvents,
    metrics: Metrics,
    may_write: Callable[[], bool],
    on_leadership: Callable[[bool], None],
    esls: Instances,
    esl_backend: BackendFactory,
    wait: WaitDurable,
    api: KubeAPI | None = None,
    declarations: Declarations | None = None,
) -> KubeParts:
    """The adapters `s.mode` needs; `api` replaces the client built from `s` (tests)."""
    api = api or KubeAPI(s.kubeconfig, in_cluster=s.in_cluster, qps=s.kube_qps, burst=s.kube_burst)
    # The markers, on every node while this service answers kube-scheduler's verbs.
    advertised = dict.fromkeys(keys.markers, MARKER_CAPACITY) if s.binds else {}
    store = (
        ObjectStore(
            api,
            ledger,
            s.resource_domain,
            metrics,
            esls,
            esl_backend,
            wait,
            may_write,
            s.policy_resync_seconds,
        )
        if s.policy_objects
        else None
    )
    # A node recreated under its name: the objects naming it are applied to it again.
    added = store.node_added if store is not None else None
    writeback: NodeWriter
    where: dict[str, Any]  # how the view treats what nodes show of the domain
    if s.mode == "dra":
        writeback = publisher = SlicePublisher(api, ledger, s, metrics, may_write)
        ledger.guard = publisher.guard
        where = {"node_resources": False, "on_node_gone": publisher.drifted}  # slices go too
    else:
        writeback = status = WriteBack(api, ledger, s, metrics, may_write, advertised)
        where = {"on_node_seen": status.node_seen, "advertised": advertised}
    view = ClusterView(
        api,
        ledger,
        keys,
        events,
        metrics,
        adopt=lambda: not may_write(),  # a follower mirrors the cluster; the leader writes it
        on_node_added=added,
        **where,
    )
    elector = (
        LeaderElector(
            api,
            s.lease_namespace,
            s.lease_name,
            s.identity or default_identity(),
            s.resource_domain,
            s.lease_duration_seconds,
            s.renew_deadline_seconds,
            s.retry_period_seconds,
            on_leadership,
        )
        if s.leader_elect
        else None
    )
    binds = s.binds
    return KubeParts(
        api=api,
        view=view,
        writeback=writeback,
        elector=elector,
        binder=Binder(api, metrics, may_write, s.bind_in_flight) if binds else None,
        lifter=Lifter(api, keys.gate, metrics, may_write) if binds else None,
        nominator=(
            Nominator(api, metrics, may_write, s.gang_nominate_delay_seconds)
            if binds and s.gang_nominate
            else None
        ),
        waker=(
            Waker(api, s.resource_domain, metrics, may_write)
            if binds and s.requeue_window_seconds > 0
            else None
        ),
        switch=(
            GateSwitch(api, s.gang_gate_switch, metrics, may_write)
            if binds and s.gang_gate_switch
            else None
        ),
        store=store,
        podgroups=(
            PodGroups(api, declarations, metrics) if binds and declarations is not None else None
        ),
    )
