"""Builds a `kubernetes.client.ApiClient` from a kubeconfig file or the in-cluster config.

Called by the local control plane (to create fake nodes), the benchmarks and tests; the
service has its own async client (extender.kube.client).
The insecure-TLS warning is silenced only when TLS verification is off for a loopback server,
which is how the local control plane's kubeconfig is written.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from urllib.parse import urlsplit

from kubernetes import client, config
from urllib3.exceptions import InsecureRequestWarning

_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def api_client(
    kubeconfig: Path | None = None, *, in_cluster: bool = False, pool_size: int | None = None
) -> client.ApiClient:
    """An ApiClient for the cluster named by `kubeconfig` (default: ~/.kube/config) or, with
    in_cluster, by the pod's service account. `pool_size` bounds concurrent connections
    (the kubernetes client defaults to 5 per CPU)."""
    configuration = client.Configuration()
    if in_cluster:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=None if kubeconfig is None else str(kubeconfig),
            client_configuration=configuration,
        )
    if pool_size is not None:
        configuration.connection_pool_maxsize = pool_size
    host = urlsplit(configuration.host).hostname or ""
    if not configuration.verify_ssl and host in _LOOPBACK_HOSTS:
        # urllib3 warns on every request; the message names the host, so only loopback is muted.
        warnings.filterwarnings(
            "ignore",
            message=f"Unverified HTTPS request is being made to host '{re.escape(host)}'",
            category=InsecureRequestWarning,
        )
    return client.ApiClient(configuration)
