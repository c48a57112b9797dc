"""The cluster directory: the files `up` writes into it, and the state file listing the
processes it started.

Used by cluster.up (which records each process here as soon as it is started), cluster.down
(which stops what the state file lists and removes exactly the entries named here, nothing
else, so `down` on a wrong directory deletes nothing of the user's) and cluster.status.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from escher_harness.localcluster.errors import ClusterError
from escher_harness.localcluster.processes import ProcessRecord


@dataclass(frozen=True)
class State:
    """What `down` needs, written before the first process starts and after each one."""

    created_dir: bool  # `up` created the directory, so `down` removes it once empty
    processes: tuple[ProcessRecord, ...] = ()


@dataclass(frozen=True)
class ClusterDir:
    root: Path

    @property
    def state_file(self) -> Path:
        return self.root / "processes.json"

    @property
    def cluster_file(self) -> Path:
        return self.root / "cluster.json"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def tokens(self) -> Path:
        return self.root / "tokens.csv"

    @property
    def sa_key(self) -> Path:
        return self.root / "sa.key"

    @property
    def scheduler_config(self) -> Path:
        return self.root / "scheduler-config.yaml"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def cert_dir(self) -> Path:
        return self.root / "certs"

    @property
    def operators(self) -> Path:
        """The workload operators' files (escher_harness.localcluster.operators), if any started."""
        return self.root / "operators"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def log(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    @property
    def audit_policy(self) -> Path:
        return self.root / "audit-policy.yaml"

    @property
    def audit_log(self) -> Path:
        """kube-apiserver's audit log, with ClusterSpec.audit_log (in logs/, removed by down)."""
        return self.logs / "kube-apiserver-audit.log"

    def read_state(self) -> State | None:
        """The state file, or None when `up` never ran here (or `down` finished)."""
        try:
            data = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise ClusterError(f"cannot read {self.state_file}: {e}") from None
        return State(
            created_dir=bool(data["created_dir"]),
            processes=tuple(ProcessRecord.from_json(p) for p in data["processes"]),
        )

    def write_state(self, state: State) -> None:
        write_json(
            self.state_file,
            {
                "created_dir": state.created_dir,
                "processes": [p.to_json() for p in state.processes],
            },
        )

    def remove(self, *, keep_logs: bool, created_dir: bool) -> None:
        """Delete what `up` wrote (the state file last), then the directory if `up` made it."""
        data = [
            self.cluster_file,
            self.kubeconfig,
            self.tokens,
            self.sa_key,
            self.scheduler_config,
            self.etcd_data,
            self.cert_dir,
            self.operators,
            self.audit_policy,
        ]
        for path in [*data, *([] if keep_logs else [self.logs]), self.state_file]:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        if created_dir and not keep_logs:
            # Not empty: the user put something there meanwhile; leave it.
            with contextlib.suppress(OSError):
                self.root.rmdir()


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write atomically, so a reader (or an interrupted `up`) never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)
