"""Configuration of the extender service: one typed settings object.

Read from ESCHER_* environment variables and overridden by `escher-extender serve` flags,
which extender.cli generates from these fields (`--kube-qps` is `kube_qps`, its help the
field's description). Everything else receives a Settings instance; nothing reads the
environment. A setting that cannot work is refused at start with a message naming it.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import Field, FiniteFloat, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from extender.core.errors import InvalidValue
from extender.core.names import check_domain
from extender.gang import topology
from extender.gang.planning import DEFAULT_OFFLOAD

# Finite: an infinite timeout or backoff is a hang, and NaN compares false with everything.
Seconds = FiniteFloat
Mode = Literal["standalone", "pure", "extender", "dra"]


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable only from this network namespace (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Settings(BaseSettings):
    """Everything the extender service can be configured with."""

    model_config = SettingsConfigDict(env_prefix="ESCHER_", extra="forbid")

    # ---- listening -------------------------------------------------------------------------
    host: str = Field("127.0.0.1", description="address to listen on")
    port: int = Field(8888, ge=0, le=65535, description="port of the policy API (and verbs)")
    tls_cert_file: Path | None = Field(None, description="serve HTTPS with this certificate")
    tls_key_file: Path | None = Field(None, description="... and this key")
    verbs_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="serve kube-scheduler's verbs on this port only (TLS; with "
        "verbs_client_ca_file, mutual TLS); the verbs are then refused on port",
    )
    verbs_host: str | None = Field(
        None, description="address of the verbs listener (default: host)"
    )
    verbs_plain: bool = Field(
        False,
        description="serve verbs_port over plain HTTP/1.1, only on a loopback verbs_host: the "
        "extender as a container of kube-scheduler's pod (deploy/overlays/sidecar)",
    )
    verbs_client_ca_file: Path | None = Field(
        None, description="require kube-scheduler's client certificate, signed by this CA"
    )
    verbs_tls_cert_file: Path | None = Field(
        None,
        description="the verbs listener's own certificate (default: tls_cert_file), so the "
        "verbs can be mutual TLS while port stays plain HTTP",
    )
    verbs_tls_key_file: Path | None = Field(None, description="... and its key")
    verbs_http2: bool = Field(
        True,
        description="serve verbs_port over HTTP/2: one connection from kube-scheduler, no "
        "handshake per gang member held at bind, more of the extender's CPU per call "
        "(docs/deployment.md); off: HTTP/1.1 as the policy API",
    )
    verbs_http1_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="also serve the verbs on this port, with verbs_port's TLS and client CA "
        "over HTTP/1.1 (uvicorn): for the scheduler entries called one pod at a time "
        "(filter, prioritize, preempt), cheaper per call for both processes than HTTP/2; bind "
        "stays on verbs_port, where gang members held at the barrier share one connection",
    )

    # ---- Kubernetes ------------------------------------------------------------------------
    mode: Mode = Field(
        "extender",
        description="extender: in kube-scheduler's path, also binding pods; pure: the policy "
        "API and the write-back only, kube-scheduler decides alone; dra: as pure, with the "
        "resources published as DRA devices (ResourceSlices and a DeviceClass per resource) "
        "instead of Node status; standalone: no Kubernetes API at all, nodes only from "
        "requests, no write-back, no bind",
    )
    dra_driver: str = Field(
        "",
        max_length=63,
        description="mode dra: the DRA driver name the ResourceSlices are published under "
        "(default: resource_domain)",
    )
    dra_skip_node_operations: bool = Field(
        False,
        description="mode dra: publish the slices with skipNodeOperations ['*'], so kubelets "
        "call no DRA plugin for these devices (KEP-5945: the DRAOptionalNodeOperations gate, "
        "alpha in 1.37, on the API server and the kubelets); off: each real node needs a "
        "kubelet plugin of the driver, a no-op one suffices (kwok nodes need none)",
    )
    dra_max_slices: int = Field(
        16,
        ge=1,
        le=1024,
        description="mode dra: ResourceSlices per node and resource at most (a pool of one "
        "slice of 128 devices each): a larger capacity is refused with 422",
    )
    kubeconfig: Path | None = Field(None, description="kubeconfig file (default: $KUBECONFIG)")
    in_cluster: bool = Field(False, description="use the pod's service account")
    kube_qps: FiniteFloat = Field(
        50.0,
        gt=0,
        description="the extender's API budget (binds, write-back): give it kube-scheduler's "
        "clientConnection.qps",
    )
    kube_burst: int = Field(100, ge=1, description="... and burst")
    resource_domain: str = Field(
        "escher.io",
        description="pods request <resource_domain>/<name>; the extender owns exactly these "
        "resources",
    )

    # ---- who may call ----------------------------------------------------------------------
    token: str | None = Field(
        None,
        description="bearer token accepted on the policy API (and, with metrics_auth, /metrics)",
    )
    kubernetes_auth: bool = Field(
        False,
        description="also accept Kubernetes tokens on the policy API: TokenReview, then RBAC "
        "through SubjectAccessReview on ephemeralresources.<resource_domain> "
        "(docs/policy-api.md)",
    )
    auth_cache_seconds: Seconds = Field(10.0, ge=0, description="how long a review is reused")
    metrics_auth: bool = Field(False, description="require the token on /metrics too")

    # ---- limits: what anything that reaches the port can make the service hold ------------
    max_body_bytes: int = Field(
        32 * 1024 * 1024, gt=0, description="largest request body (a 5,000-node NodeList ~10 MB)"
    )
    header_timeout_seconds: Seconds = Field(
        10.0,
        gt=0,
        description="a connection's TLS handshake and each request's headers must be done "
        "within this (slowloris)",
    )
    max_pending_connections: int = Field(
        256,
        ge=1,
        description="connections per listener still in handshake or headers; a new one past "
        "that closes the oldest",
    )
    body_timeout_seconds: Seconds = Field(30.0, gt=0, description="a request body's deadline")
    max_concurrency: int = Field(
        2000, ge=1, description="requests in progress at once; more are answered 503 at once"
    )
    filtered_max_pods: int = Field(
        50_000, ge=1, description="pods seen at filter and not yet bound, kept for their bind"
    )
    filtered_max_bytes: int = Field(
        64 * 1024 * 1024, ge=1024, description="... and their size at most"
    )
    requeue_window_seconds: Seconds = Field(
        5.0,
        ge=0,
        description="a pod turned away for an ephemeral resource is touched (so kube-scheduler "
        "retries it) when a holding of it is released within this time; 0: off",
    )
    requeue_max_pods: int = Field(10_000, ge=1, description="pods remembered for that at most")
    max_esl_instances: int = Field(1000, ge=1, description="ESL instances at most")

    # ---- policies as objects -----------------------------------------------------------------
    policy_objects: bool = Field(
        True,
        description="keep policies as EphemeralResource and ESL objects (the CRDs of "
        "deploy/crds), reconciled by the leader, the policy API a façade over them; off: in "
        "the leader's memory only (always so in mode standalone)",
    )
    policy_resync_seconds: Seconds = Field(
        10.0,
        gt=0,
        description="how often policy objects not settled are reconciled again, and their "
        "status's usage refreshed",
    )
    max_learned_nodes: int = Field(
        10_000, ge=1, description="standalone mode: nodes learnt from requests at most"
    )

    # ---- write-back --------------------------------------------------------------------------
    writeback_coalesce_seconds: Seconds = Field(
        0.02, ge=0, description="changes gathered this long become one patch per node"
    )
    writeback_backoff_initial_seconds: Seconds = Field(
        0.1, gt=0, description="retry backoff while the API server fails: first"
    )
    writeback_backoff_max_seconds: Seconds = Field(10.0, gt=0, description="... and longest")
    writeback_wait_seconds: Seconds = Field(
        10.0,
        ge=0,
        description="how long a policy call waits for its change on the nodes before "
        "answering 202 (503 with leader election: a step-down would drop it)",
    )

    # ---- gangs -------------------------------------------------------------------------------
    gang_wait_seconds: Seconds = Field(
        60.0,
        gt=0,
        description="how long a member's bind waits for the rest of its gang, at most (its "
        "reservation's expiry ends the wait sooner); below the httpTimeout of the bind entry "
        "in the KubeSchedulerConfiguration",
    )
    bind_in_flight: int = Field(
        64,
        ge=1,
        le=1024,
        description="Bindings in flight at most: a gang's bind burst takes this many API "
        "calls at a time, so its answers come back in loop turns of at most this many",
    )
    bind_answers_per_turn: int = Field(
        16,
        ge=1,
        le=1024,
        description="gang members' bind answers sent in one turn of the event loop at most "
        "(the rest in the turns after), so that a bind burst's Bindings coming back together, "
        "or a gang's held members refused together, do not hold the loop for all of their "
        "answers",
    )
    loop_watch_interval_seconds: Seconds = Field(
        0.05,
        gt=0,
        description="how often the event loop's lag is measured (escher_event_loop_lag_seconds)",
    )
    gang_expiry_interval_seconds: Seconds = Field(
        1.0, gt=0, description="how often expired gang reservations are looked for"
    )
    gang_backoff_initial_seconds: Seconds = Field(
        1.0, gt=0, description="backoff before a gang whose reservation expired tries again"
    )
    gang_backoff_max_seconds: Seconds = Field(60.0, gt=0, description="... at most")
    gang_plan_offload_above: int = Field(
        DEFAULT_OFFLOAD.background,
        ge=0,
        description="a gang planned in the background (the gang gate) is planned in a worker "
        "thread above this much work, inline below: nodes times the passes its topology makes "
        "over them (1 plain, 2 packed, 5 with a required level, 6 preferred), plus members",
    )
    gang_filter_plan_offload_above: int = Field(
        DEFAULT_OFFLOAD.filter,
        ge=0,
        description="... and one planned in its first member's filter (kube-scheduler's "
        "scheduling cycle waits for that call; its binding cycles, other gangs' binds, do not)",
    )
    gang_lift_interval_seconds: Seconds = Field(
        1.0,
        gt=0,
        description="how often held gangs are planned again without a pod event (room a node "
        "added or grew)",
    )
    gang_gate_switch: str = Field(
        "",
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?)?$",
        max_length=317,
        description="NAMESPACE/NAME of the ConfigMap deploy/'s adaptive gang-gate policy reads: "
        "the extender sets its hold while gangs wait for room (empty: none written)",
    )
    gang_nominate: bool = Field(
        True,
        description="write each gang member's reserved node to its status.nominatedNodeName: "
        "kube-scheduler then tries that node alone, and counts the reservation against other "
        "pods (extender.gang.kube.nominator)",
    )
    gang_nominate_delay_seconds: Seconds = Field(
        0.1,
        ge=0,
        le=10,
        description="how long the nomination of a member whose scheduling cycle may come "
        "first (created after its gang's reservation) waits, and is then written only if that "
        "cycle has not come: kube-scheduler tries a new pod within milliseconds when it has no "
        "backlog, and the member's filter gives it its place anyway (0: at once; "
        "extender.gang.nominations)",
    )
    gang_topology: str = Field(
        topology.DEFAULT,
        max_length=2048,
        description="topology levels gangs may require or prefer, outermost first: "
        "name=node-label-key,... (extender.gang.topology)",
    )
    gang_gate_cooldown_seconds: Seconds = Field(
        10.0, ge=0, description="... and keeps it this long after"
    )

    # ---- leader election (replicas): kube-scheduler's leaderElection defaults ---------------
    leader_elect: bool = Field(False, description="run as one of several replicas")
    lease_name: str = Field("escher-extender", description="the Lease replicas compete for")
    lease_namespace: str = Field("kube-system", description="its namespace")
    lease_duration_seconds: Seconds = Field(15.0, gt=0, description="the lease's duration")
    renew_deadline_seconds: Seconds = Field(
        10.0, gt=0, description="a leader that cannot renew within this steps down"
    )
    retry_period_seconds: Seconds = Field(2.0, gt=0, description="between renewals and tries")
    identity: str | None = Field(
        None, description="this replica's name in the lease (default: hostname_pid)"
    )

    # ---- the process ---------------------------------------------------------------------------
    gc_freeze: bool = Field(
        True,
        description="once the ledger is built from the cluster, move everything alive then "
        "out of the garbage collector's walks (gc.freeze): its full collections, which stop "
        "the event loop, then cost what came after startup, not the whole process "
        "(extender.collector)",
    )
    gc_defer_full_seconds: Seconds = Field(
        300.0,
        ge=0,
        description="while gang members' bind calls are in flight, defer the garbage "
        "collector's full collections, which would walk every one of them, for at most this "
        "long a busy spell (overlapping gangs of up to 1,024 at 5,000 nodes kept members "
        "binding for 70-145 s on end; 0: never defer; extender.collector)",
    )

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="DEBUG, INFO, WARNING or ERROR"
    )
    log_json: bool = Field(True, description="log JSON lines (off: text)")

    @field_validator("dra_driver")
    @classmethod
    def _driver(cls, v: str) -> str:
        # A DRA driver name is a DNS subdomain of at most 63 characters, as the domain.
        try:
            return check_domain(v) if v else v
        except InvalidValue as e:
            raise ValueError(str(e).replace("resource domain", "DRA driver")) from None

    @field_validator("resource_domain")
    @classmethod
    def _domain(cls, v: str) -> str:
        try:
            return check_domain(v)
        except InvalidValue as e:
            raise ValueError(str(e)) from None

    @field_validator("gang_topology")
    @classmethod
    def _topology(cls, v: str) -> str:
        return str(topology.parse(v))  # its ValueError names the bad level

    @field_validator("log_level", mode="before")
    @classmethod
    def _level(cls, v: object) -> object:
        return v.upper() if isinstance(v, str) else v

    @property
    def kube(self) -> bool:
        """Whether the service talks to the Kubernetes API (every mode but standalone)."""
        return self.mode != "standalone"

    @property
    def binds(self) -> bool:
        """Whether the service binds pods (kube-scheduler's bindVerb): the extender mode."""
        return self.mode == "extender"

    @property
    def dra_driver_name(self) -> str:
        """The DRA driver the dra mode publishes under."""
        return self.dra_driver or self.resource_domain

    @property
    def hierarchy(self) -> topology.Hierarchy:
        return topology.parse(self.gang_topology)

    def verbs_certificate(self) -> tuple[Path, Path] | None:
        """The verbs listener's certificate and key: its own, else the service's (none when
        they are plain)."""
        if self.verbs_plain:
            return None
        if self.verbs_tls_cert_file is not None and self.verbs_tls_key_file is not None:
            return self.verbs_tls_cert_file, self.verbs_tls_key_file
        if self.tls_cert_file is not None and self.tls_key_file is not None:
            return self.tls_cert_file, self.tls_key_file
        return None

    def verbs_address(self) -> str:
        """The verbs listener's address: its own, else the service's."""
        return self.host if self.verbs_host is None else self.verbs_host

    def _plain_verbs(self) -> None:
        """Without TLS anyone who reaches the verbs can have /bind create Bindings: only the
        network namespace's own loopback (a container beside kube-scheduler in its pod)."""
        if self.verbs_port is None:
            raise ValueError("verbs_plain needs verbs_port (the verbs' own listener)")
        if not is_loopback(self.verbs_address()):
            raise ValueError(
                f"verbs_plain serves the verbs without TLS: only on a loopback verbs_host, "
                f"not {self.verbs_address()!r}"
            )
        if self.verbs_client_ca_file is not None or self.verbs_tls_cert_file is not None:
            raise ValueError("verbs_plain serves no TLS: no verbs certificate or client CA")

    def _http1_verbs(self) -> None:
        """A second listener beside verbs_port's HTTP/2 one, with its TLS."""
        if self.verbs_port is None or self.verbs_plain or not self.verbs_http2:
            raise ValueError(
                "verbs_http1_port is an HTTP/1.1 listener beside verbs_port's HTTP/2 one: it "
                "needs verbs_port over TLS with verbs_http2 on (verbs_plain and verbs_http2 "
                "off serve HTTP/1.1 on verbs_port already)"
            )
        if self.verbs_http1_port in (self.port, self.verbs_port) and self.verbs_http1_port:
            raise ValueError("verbs_http1_port must differ from port and verbs_port")

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file must be given together")
        if self.verbs_client_ca_file is not None and self.verbs_port is None:
            raise ValueError("verbs_client_ca_file needs verbs_port (the mutual-TLS listener)")
        if self.verbs_plain:
            self._plain_verbs()
        elif self.verbs_port is not None and self.verbs_certificate() is None:
            raise ValueError(
                "verbs_port serves TLS: give tls_cert_file and tls_key_file (or "
                "verbs_tls_cert_file and verbs_tls_key_file), or verbs_plain on loopback"
            )
        if (self.verbs_tls_cert_file is None) != (self.verbs_tls_key_file is None):
            raise ValueError("give verbs_tls_cert_file and verbs_tls_key_file together")
        if self.verbs_tls_cert_file is not None and self.verbs_port is None:
            raise ValueError("verbs_tls_cert_file needs verbs_port (the verbs' own listener)")
        if self.verbs_port is not None and self.verbs_port == self.port != 0:
            raise ValueError("verbs_port must differ from port")
        if self.verbs_http1_port is not None:
            self._http1_verbs()
        if self.leader_elect:
            if not self.kube:
                raise ValueError("leader_elect needs the Kubernetes API (not mode standalone)")
            if self.renew_deadline_seconds >= self.lease_duration_seconds:
                raise ValueError(
                    "renew_deadline_seconds must be below lease_duration_seconds, or a "
                    "deposed leader could still write after another won the lease"
                )
            if self.retry_period_seconds >= self.renew_deadline_seconds:
                raise ValueError("retry_period_seconds must be below renew_deadline_seconds")
        if self.writeback_backoff_initial_seconds > self.writeback_backoff_max_seconds:
            raise ValueError("writeback_backoff_initial_seconds is above the max")
        if self.kubernetes_auth and not self.kube:
            raise ValueError("kubernetes_auth needs the Kubernetes API (not mode standalone)")
        return self
