"""The local control plane's errors: one base class, and one subclass for missing binaries.

Raised by every module of escher_harness.localcluster; the CLI turns them into a one-line message,
the pytest fixture turns MissingBinaryError into a test failure.
"""

from __future__ import annotations

from pathlib import Path


class ClusterError(Exception):
    """The local control plane could not be started, stopped or inspected."""


class MissingBinaryError(ClusterError):
    """etcd, kube-apiserver, kube-scheduler, kwok or kubectl is not where it is looked for."""

    def __init__(self, binary: str, directory: Path) -> None:
        self.binary = binary
        self.directory = directory
        super().__init__(
            f"{binary} not found (or not executable) in {directory}: "
            "run `make binaries` or set ESCHER_BIN_DIR to a directory holding "
            "etcd, kube-apiserver, kube-scheduler and kwok (kwok only for clusters that run it, "
            "kubectl only for the deploy tests)"
        )
