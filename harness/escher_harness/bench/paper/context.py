"""What a paper experiment runs against: one mode's running cluster, its API client, the
service's policy client, the run's seed and a progress line. Built by
escher_harness.bench.paper.runner, one per cluster; read by the experiment modules."""

from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass
from typing import Final

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from escher_harness import localcluster
from escher_harness.workload import Workload
from extender.esl.client import PolicyClient

# The label on every pod an experiment creates, its value the experiment's run.
LABEL: Final = "bench.escher.io/paper"
_DELETE_ATTEMPTS: Final = 5


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass
class Context:
    info: localcluster.ClusterInfo
    api: client.ApiClient
    policy: PolicyClient
    rng: random.Random
    rep: int  # 1-based: names carry it, so no repetition meets another's objects

    @property
    def mode(self) -> str:
        return self.info.mode

    def resource(self, name: str) -> str:
        """The extended resource a pod requests for the short name `name`."""
        return f"{self.info.resource_domain}/{name}"

    def progress(self, msg: str) -> None:
        say(f"rep {self.rep} {self.mode}: {msg}")

    def delete_pods(self, run: str) -> None:
        """Delete the pods of experiment run `run` and wait until they are gone; a delete the
        loaded API server times out (504, as 1,000 pods at once did) is asked again."""
        for attempt in range(_DELETE_ATTEMPTS):
            try:
                Workload(self.api).delete_labelled(f"{LABEL}={run}", timeout=600)
                return
            except ApiException as e:
                if e.status is None or e.status < 500 or attempt == _DELETE_ATTEMPTS - 1:
                    raise
                self.progress(f"deleting the {run} pods: {e.status} {e.reason}; again")
