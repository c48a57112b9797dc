"""The listeners' args (settings.listen), validated here: where the service listens, with
which TLS, and what anything that reaches a port can make it hold. Their ESCHER_* variables
and `serve` flags are the fields' own names (--port, --verbs-port, --max-body-bytes...).

Read by extender.server, which opens the listeners, and extender.app, which bounds the
bodies and says which ports serve the verbs alone.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from pydantic import Field, model_validator

from extender.core.args import Args, Seconds


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable only from this network namespace (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ListenArgs(Args):
    """The policy API's listener, the verbs' own ones, and the bounds on a connection."""

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
    def _consistent(self) -> ListenArgs:
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
        return self
