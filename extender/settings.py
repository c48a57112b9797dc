"""Configuration of the extender service: one typed settings object.

Read from ESCHER_* environment variables and overridden by `escher-extender serve` flags
(extender.cli). Everything else receives a Settings instance; nothing reads the environment.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# A DNS subdomain, as Kubernetes requires for the prefix of an extended resource name.
_DOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class Settings(BaseSettings):
    """Everything the extender service can be configured with."""

    model_config = SettingsConfigDict(env_prefix="ESCHER_", extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(8888, ge=0, le=65535)

    # Kubernetes access. kube=False is the standalone mode: node data only from requests,
    # write-back and bind off.
    kube: bool = True
    kubeconfig: Path | None = None
    in_cluster: bool = False

    # Pods request <resource_domain>/<name>; the extender owns exactly these resources.
    resource_domain: str = "escher.io"

    # Bearer token required on the policy API (/v1/...); None means no auth.
    token: str | None = None

    # Serve HTTPS when both are set.
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None

    # Requests larger than this are refused with 413 (a 5,000-node NodeList is ~10 MB).
    max_body_bytes: int = Field(64 * 1024 * 1024, gt=0)

    # Write-back: how long changes are gathered before one patch per node is sent, the
    # retry backoff bounds while the API server fails, and how long a policy call waits for
    # its change to be durable on the nodes before answering 202 instead of 200.
    writeback_coalesce_seconds: float = Field(0.02, ge=0)
    writeback_backoff_initial_seconds: float = Field(0.1, gt=0)
    writeback_backoff_max_seconds: float = Field(10.0, gt=0)
    writeback_wait_seconds: float = Field(10.0, ge=0)

    # How long a gang member's bind waits for the rest of its gang (must stay below the
    # extender's httpTimeout in the KubeSchedulerConfiguration), and how often expired gang
    # reservations are looked for.
    gang_wait_seconds: float = Field(10.0, gt=0)
    gang_expiry_interval_seconds: float = Field(1.0, gt=0)

    # Bind pods through the API (the extender's bindVerb). Off in pure mode and with kube=False.
    bind: bool = True

    log_level: str = "INFO"
    log_json: bool = True

    @field_validator("resource_domain")
    @classmethod
    def _domain_is_dns_subdomain(cls, v: str) -> str:
        if not _DOMAIN.match(v) or len(v) > 253 or v.endswith("kubernetes.io"):
            raise ValueError(f"resource_domain {v!r} must be a DNS subdomain outside kubernetes.io")
        return v

    @model_validator(mode="after")
    def _tls_pair(self) -> Settings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file must be given together")
        return self
