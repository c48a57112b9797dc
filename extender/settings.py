"""Configuration of the extender service: one typed settings object.

Read from ESCHER_* environment variables and overridden by `escher-extender serve` flags
(extender.cli). Everything else receives a Settings instance; nothing reads the environment.
A setting that cannot work is refused at start with a message naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, FiniteFloat, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from extender.core.errors import InvalidValue
from extender.core.names import check_domain

# Finite: an infinite timeout or backoff is a hang, and NaN compares false with everything.
Seconds = FiniteFloat


class Settings(BaseSettings):
    """Everything the extender service can be configured with."""

    model_config = SettingsConfigDict(env_prefix="ESCHER_", extra="forbid")

    # ---- listening -------------------------------------------------------------------------
    host: str = "127.0.0.1"
    port: int = Field(8888, ge=0, le=65535)
    # Serve HTTPS when both are set.
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    # A second listener for kube-scheduler's verbs only, requiring a client certificate
    # signed by verbs_client_ca_file (mutual TLS); the verbs are then refused on `port`.
    verbs_port: int | None = Field(None, ge=0, le=65535)
    verbs_client_ca_file: Path | None = None
    # The verbs listener's own certificate (default: tls_cert_file and tls_key_file), so the
    # verbs can be mutual TLS while `port` stays plain HTTP (the embedded cluster).
    verbs_tls_cert_file: Path | None = None
    verbs_tls_key_file: Path | None = None
    # Serve verbs_port over HTTP/2 (extender.http.verbs_listener): one connection from
    # kube-scheduler, no handshake per gang member held at bind, but more of the extender's
    # CPU per call (docs/deployment.md). Off: HTTP/1.1 on uvicorn, as the policy API.
    verbs_http2: bool = True

    # ---- Kubernetes ------------------------------------------------------------------------
    # kube=False is the standalone mode: node data only from requests, write-back and bind off.
    kube: bool = True
    kubeconfig: Path | None = None
    in_cluster: bool = False
    # The extender's own API budget: the same figures as kube-scheduler's clientConnection.
    kube_qps: FiniteFloat = Field(50.0, gt=0)
    kube_burst: int = Field(100, ge=1)
    # Bind pods through the API (the extender's bindVerb). Off in pure mode and with kube=False.
    bind: bool = True

    # Pods request <resource_domain>/<name>; the extender owns exactly these resources.
    resource_domain: str = "escher.io"

    # ---- who may call ----------------------------------------------------------------------
    # Bearer token accepted on the policy API (/v1/...) and, with metrics_auth, /metrics.
    token: str | None = None
    # Also accept Kubernetes credentials: the bearer token is checked with a TokenReview and
    # the caller's right with a SubjectAccessReview on the virtual resource
    # `ephemeralresources.<resource_domain>` (docs/policy-api.md).
    kubernetes_auth: bool = False
    auth_cache_seconds: Seconds = Field(10.0, ge=0)
    metrics_auth: bool = False

    # ---- limits: what anything that reaches the port can make the service hold ------------
    # A 5,000-node NodeList body is about 10 MB.
    max_body_bytes: int = Field(32 * 1024 * 1024, gt=0)
    # A connection's TLS handshake and each request's headers must be done within
    # header_timeout_seconds; at most max_pending_connections per listener may be at it at
    # once, a new one past that closes the oldest (extender.http.pending: slowloris).
    header_timeout_seconds: Seconds = Field(10.0, gt=0)
    max_pending_connections: int = Field(256, ge=1)
    body_timeout_seconds: Seconds = Field(30.0, gt=0)
    # Requests in progress at once; more are answered 503 by the server at once.
    max_concurrency: int = Field(2000, ge=1)
    # Pods seen at filter and not yet bound, kept for their bind.
    filtered_max_pods: int = Field(50_000, ge=1)
    filtered_max_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    # A pod the filter turned away for an ephemeral resource is touched (so kube-scheduler
    # retries it) when a holding of that resource is released within this many seconds;
    # at most requeue_max_pods are remembered (extender.requeue). 0 turns it off.
    requeue_window_seconds: Seconds = Field(5.0, ge=0)
    requeue_max_pods: int = Field(10_000, ge=1)
    max_esl_instances: int = Field(1000, ge=1)
    # Standalone mode: nodes learnt from requests.
    max_learned_nodes: int = Field(10_000, ge=1)

    # ---- write-back --------------------------------------------------------------------------
    # How long changes are gathered before one patch per node, the retry backoff bounds while
    # the API server fails, and how long a policy call waits for its change to be durable on
    # the nodes before answering 202 instead of 200 (503 with leader election: a step-down
    # would drop it).
    writeback_coalesce_seconds: Seconds = Field(0.02, ge=0)
    writeback_backoff_initial_seconds: Seconds = Field(0.1, gt=0)
    writeback_backoff_max_seconds: Seconds = Field(10.0, gt=0)
    writeback_wait_seconds: Seconds = Field(10.0, ge=0)

    # ---- gangs -------------------------------------------------------------------------------
    # How long a member's bind waits for the rest of its gang (below the extender's
    # httpTimeout in the KubeSchedulerConfiguration), how often expired reservations are
    # looked for, and the backoff before a gang whose reservation expired tries again.
    gang_wait_seconds: Seconds = Field(10.0, gt=0)
    gang_expiry_interval_seconds: Seconds = Field(1.0, gt=0)
    gang_backoff_initial_seconds: Seconds = Field(1.0, gt=0)
    gang_backoff_max_seconds: Seconds = Field(60.0, gt=0)
    # How often held gangs that did not fit are planned again without a pod event (room a
    # node added or grew); pod events plan them at once.
    gang_lift_interval_seconds: Seconds = Field(1.0, gt=0)
    # The adaptive gang gate: the ConfigMap ("<namespace>/<name>") deploy/'s gang-gate policy
    # reads; the extender sets its `hold` while some gang waits for room and for
    # gang_gate_cooldown_seconds after. Empty: the extender writes no switch.
    gang_gate_switch: str = Field(
        "",
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?)?$",
        max_length=317,
    )
    gang_gate_cooldown_seconds: Seconds = Field(10.0, ge=0)

    # ---- leader election (replicas) -------------------------------------------------------
    # Same defaults as kube-scheduler's leaderElection.
    leader_elect: bool = False
    lease_name: str = "escher-extender"
    lease_namespace: str = "kube-system"
    lease_duration_seconds: Seconds = Field(15.0, gt=0)
    renew_deadline_seconds: Seconds = Field(10.0, gt=0)
    retry_period_seconds: Seconds = Field(2.0, gt=0)
    # This replica's identity in the lease (default: hostname and pid).
    identity: str | None = None

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_json: bool = True

    @field_validator("resource_domain")
    @classmethod
    def _domain(cls, v: str) -> str:
        try:
            return check_domain(v)
        except InvalidValue as e:
            raise ValueError(str(e)) from None

    @field_validator("log_level", mode="before")
    @classmethod
    def _level(cls, v: object) -> object:
        return v.upper() if isinstance(v, str) else v

    def verbs_certificate(self) -> tuple[Path, Path] | None:
        """The verbs listener's certificate and key: its own, else the service's."""
        if self.verbs_tls_cert_file is not None and self.verbs_tls_key_file is not None:
            return self.verbs_tls_cert_file, self.verbs_tls_key_file
        if self.tls_cert_file is not None and self.tls_key_file is not None:
            return self.tls_cert_file, self.tls_key_file
        return None

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file must be given together")
        if self.verbs_client_ca_file is not None and self.verbs_port is None:
            raise ValueError("verbs_client_ca_file needs verbs_port (the mutual-TLS listener)")
        if self.verbs_port is not None and self.verbs_certificate() is None:
            raise ValueError(
                "verbs_port serves TLS: give tls_cert_file and tls_key_file (or "
                "verbs_tls_cert_file and verbs_tls_key_file)"
            )
        if (self.verbs_tls_cert_file is None) != (self.verbs_tls_key_file is None):
            raise ValueError("give verbs_tls_cert_file and verbs_tls_key_file together")
        if self.verbs_tls_cert_file is not None and self.verbs_port is None:
            raise ValueError("verbs_tls_cert_file needs verbs_port (the verbs' own listener)")
        if self.verbs_port is not None and self.verbs_port == self.port != 0:
            raise ValueError("verbs_port must differ from port")
        if self.leader_elect:
            if not self.kube:
                raise ValueError("leader_elect needs the Kubernetes API (kube=True)")
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
            raise ValueError("kubernetes_auth needs the Kubernetes API (kube=True)")
        return self
