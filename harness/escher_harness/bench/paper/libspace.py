"""E6's LibSpace design (the paper's Fig. 7): the pure gang runner as a library that serialises
gangs: each gang's plan, creation and wait for its members bound hold one lock, so the next
gang plans from a cluster state that already holds it and no two plans race for the same
room. Its own module so that its lines of policy count alone. Used by
escher_harness.bench.paper.e6_designs."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from escher_harness.bench.approaches import Env, GangJob
from escher_harness.bench.approaches.pure import Pure


@dataclass(frozen=True)
class Serialised(Pure):
    lock: threading.Lock = field(default_factory=threading.Lock, compare=False)

    def submit(self, env: Env, job: GangJob) -> bool:
        with self.lock:
            return super().submit(env, job)

    def code(self) -> list[Path]:
        return [*super().code(), Path(__file__)]
