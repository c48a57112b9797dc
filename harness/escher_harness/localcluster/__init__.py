"""The embedded local Kubernetes control plane: real etcd, kube-apiserver and kube-scheduler
as plain processes on 127.0.0.1, fake nodes, and optionally the extender service.

Used by `escher-extender cluster up|down|status` (commands), the pytest fixtures
(pytest_plugin), e2e tests and benchmarks. The Python API is `up`, `down`, `status`, `load`.
"""

from escher_harness.localcluster.cluster import (
    ClusterInfo,
    ClusterSpec,
    ClusterStatus,
    ComponentStatus,
    down,
    load,
    restart_component,
    start_component,
    status,
    stop_component,
    up,
)
from escher_harness.localcluster.errors import ClusterError, MissingBinaryError

__all__ = [
    "ClusterError",
    "ClusterInfo",
    "ClusterSpec",
    "ClusterStatus",
    "ComponentStatus",
    "MissingBinaryError",
    "down",
    "load",
    "restart_component",
    "start_component",
    "status",
    "stop_component",
    "up",
]
