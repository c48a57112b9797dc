"""What a local cluster is to start: ClusterSpec, checked as it is made.

Built by the CLI (commands), the pytest fixtures (pytest_plugin), e2e tests and benchmarks, and
given to cluster.up, whose start steps (startup) read it; cluster re-exports it, so
`escher_harness.localcluster.ClusterSpec` and `...cluster.ClusterSpec` both name it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from escher_harness.localcluster.config import (
    DEFAULT_RESOURCE_DOMAIN,
    MODES,
    SCOPES,
    LeaseTimes,
    Mode,
    Scope,
)
from escher_harness.localcluster.cpus import CpuSplit
from escher_harness.localcluster.errors import ClusterError
from escher_harness.localcluster.fakenodes import Topology

_EXTENDED_RESOURCE = re.compile(
    r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


@dataclass(frozen=True)
class ClusterSpec:
    """What to start. Ports left None are chosen free; fixed ones are checked first."""

    dir: Path
    nodes: int = 3
    mode: Mode = "none"
    node_cpu: str = "32"
    node_memory: str = "128Gi"
    node_pods: str = "110"
    node_labels: Mapping[str, str] = field(default_factory=dict)
    # Label the nodes into zones, blocks and racks (escher_harness.localcluster.fakenodes).
    node_topology: Topology | None = None
    # Extended resources every node advertises, e.g. {"example.com/gpu": "4"}.
    node_resources: Mapping[str, str] = field(default_factory=dict)
    # A KubeSchedulerConfiguration to run instead of the mode's; clientConnection.kubeconfig
    # and leaderElection are overridden, an urlPrefix of "${EXTENDER_URL}" is filled in.
    scheduler_config: Path | None = None
    resource_domain: str = DEFAULT_RESOURCE_DOMAIN
    # Given to kube-apiserver and kube-scheduler (feature gates) / kube-apiserver (runtime
    # config), e.g. {"GenericWorkload": True} and {"scheduling.k8s.io/v1alpha1": "true"}.
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    runtime_config: Mapping[str, str] = field(default_factory=dict)
    # kube-scheduler's gates, when they must differ from kube-apiserver's (None: the same).
    scheduler_feature_gates: Mapping[str, bool] | None = None
    # Serve the objects users declare gangs with (extender.gang.declarations): the native
    # scheduling.k8s.io/v1beta1 PodGroup (kube-apiserver's GenericWorkload gate and runtime
    # config) and scheduler-plugins' PodGroup CRD (from `make peers`). kube-scheduler runs
    # with GenericWorkload off, so that its own GangScheduling plugin stays out of the
    # extender's way (docs/gangs.md, "Declaring a gang"), unless scheduler_feature_gates
    # says otherwise.
    gang_declarations: bool = False
    # A kube-scheduler to run instead of the one found with etcd and kube-apiserver, e.g. the
    # benchmark's peer <cache>/bin/kube-scheduler-plugins (hack/build-peers.sh).
    scheduler_binary: Path | None = None
    # YAML files whose objects (e.g. a peer scheduler's CRDs) are created once kube-apiserver
    # is ready and before kube-scheduler starts; CRDs are waited for until Established.
    manifests: tuple[Path, ...] = ()
    etcd_port: int | None = None
    apiserver_port: int | None = None
    scheduler_port: int | None = None
    extender_port: int | None = None
    # Run kwok as the nodes' kubelets: bound pods go Running, and Succeeded after their
    # harness.escher.io/run-time (escher_harness.localcluster.kwok). Off: they stay Pending.
    kwok: bool = True
    # The API budget of kube-scheduler's client (clientConnection.qps and burst), of the
    # extender's own client and (mode dra) of kube-controller-manager's; None keeps their
    # defaults (kube-scheduler's 50 and 100). Benchmarks give
    # every scheduler and the extender one high figure, so no token bucket decides a result.
    client_qps: float | None = None
    client_burst: int | None = None
    # percentageOfNodesToScore of the scheduler (None: the mode's template, else the default).
    percentage_of_nodes_to_score: int | None = None
    # Extender replicas (modes extender and pure). 1: one extender, no leader election. More:
    # components extender-0, extender-1, ... run with --leader-elect on the Lease
    # kube-system/escher-extender with these times, behind the service proxy (extender-proxy,
    # escher_harness.localcluster.serviceproxy), which extender_url and kube-scheduler use.
    replicas: int = 1
    lease: LeaseTimes = field(default_factory=LeaseTimes)
    # In extender mode kube-scheduler calls the verbs over mutual TLS, as deploy/ does. False:
    # over plain HTTP on a listener of their own on loopback, as deploy/'s sidecar overlay
    # runs them (the extender a container of kube-scheduler's pod).
    verbs_tls: bool = True
    # ... and over mutual TLS the verbs' listener speaks HTTP/2 (hypercorn), as deploy/ runs
    # it. False: HTTP/1.1 only (uvicorn, --no-verbs-http2), to measure what HTTP/2 costs the
    # exchanges that hold no call open (prioritize).
    verbs_http2: bool = True
    # ... and, split, beside that HTTP/2 listener an HTTP/1.1 one (--verbs-http1-port) that
    # the filter and prioritize entries call, as deploy/ runs them. False: every verb over
    # HTTP/2, as before, to measure what the HTTP/1.1 listener gives.
    verbs_http1: bool = True
    # In extender mode, which pods kube-scheduler sends the extender. "split" (deploy/'s
    # extender overlay): each exchange only for the pods marked for it,
    # scheduler-config/extender-split.yaml and deploy's marker admission policy
    # (escher_harness.localcluster.markers) marking gang members and pods with a preference at
    # creation. "every-pod": every pod every exchange (scheduler-config/extender.yaml), as
    # before the split; the benchmarks compare it, and e2e tests of the verbs use it.
    scope: Scope = "split"
    # In extender mode, the adaptive gang gate as deploy/ runs it: deploy's gang-gate
    # admission policy (escher_harness.localcluster.gangate), and the extender writing its
    # switch, so that gang members are held at the gang gate while gangs wait for room.
    gang_gate: bool = False
    # Pin kube-scheduler and the extender to CPUs of their own, apart from the rest of the
    # cluster (escher_harness.localcluster.cpus). None: every process on every CPU.
    cpu_split: CpuSplit | None = None
    # The extender's CPU share (its replicas' too): its session's autogroup nice, as a pod's
    # CPU request sets its cgroup's weight (processes.set_autogroup_nice). 0: the same share
    # as every other process; -5: about 3x; no effect without an extender.
    extender_nice: int = 0
    # How often the service proxy asks each replica's /readyz.
    proxy_poll: float = 0.2
    # kube-apiserver writes an audit log (ClusterDir.audit_log, JSON lines) under
    # config.AUDIT_POLICY, kube-scheduling-perf's policy: what `bench scheduling-perf` reads
    # created-to-scheduled from. Off by default: every request logged costs the API server.
    audit_log: bool = False
    # Budget in seconds for all components to become ready (node creation not included; kwok
    # has the same budget again, from the nodes' creation, to take them over).
    timeout: float = 120.0

    @property
    def split(self) -> bool:
        """Whether kube-scheduler sends each exchange only to the pods marked for it."""
        return self.mode == "extender" and self.scope == "split"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ClusterError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.nodes < 0:
            raise ClusterError(f"nodes must be >= 0, not {self.nodes}")
        if self.timeout <= 0:
            raise ClusterError(f"timeout must be > 0, not {self.timeout}")
        if self.replicas < 1:
            raise ClusterError(f"replicas must be >= 1, not {self.replicas}")
        if self.replicas > 1 and self.mode == "none":
            raise ClusterError("replicas are extender replicas: they need mode extender or pure")
        if self.scope not in SCOPES:
            raise ClusterError(f"scope {self.scope!r} is not one of {', '.join(SCOPES)}")
        if self.scope != "split" and self.mode != "extender":
            raise ClusterError(
                f"scope {self.scope} is a way of calling the extender: it needs mode extender"
            )
        if not (self.verbs_tls and self.verbs_http2 and self.verbs_http1) and (
            self.mode != "extender"
        ):
            raise ClusterError(
                "verbs_tls, verbs_http2 and verbs_http1 are the verbs' listeners: mode extender"
            )
        if self.gang_gate and self.mode != "extender":
            raise ClusterError("gang_gate holds gangs for the extender: it needs mode extender")
        if not -20 <= self.extender_nice <= 19:
            raise ClusterError(f"extender_nice must be in -20..19, not {self.extender_nice}")
        if self.proxy_poll <= 0:
            raise ClusterError(f"proxy_poll must be > 0, not {self.proxy_poll}")
        if self.client_qps is not None and self.client_qps <= 0:
            raise ClusterError(f"client_qps must be > 0, not {self.client_qps}")
        if self.client_burst is not None and self.client_burst < 1:
            raise ClusterError(f"client_burst must be >= 1, not {self.client_burst}")
        pct = self.percentage_of_nodes_to_score
        if pct is not None and not 0 <= pct <= 100:
            raise ClusterError(f"percentage_of_nodes_to_score must be in 0..100, not {pct}")
        for name, quantity in self.node_resources.items():
            if not _EXTENDED_RESOURCE.match(name) or "kubernetes.io/" in name:
                raise ClusterError(
                    f"node resource {name!r} is not an extended resource name "
                    "(<domain>/<name>, outside kubernetes.io)"
                )
            if not str(quantity).isdigit():
                raise ClusterError(
                    f"node resource {name}={quantity!r}: extended resources are whole numbers"
                )
