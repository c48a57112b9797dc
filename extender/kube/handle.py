"""What every feature's Kubernetes side is built with (kube-scheduler's framework.Handle).

Made once by the composition root of the Kubernetes side (extender.cluster.build) and handed
to each feature's own `build(args, handle)`: the API client, the resource domain, the ledger
and its keys, the metrics, and whether this replica may write now (it leads, or runs alone).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from extender.core.ledger import Ledger
from extender.core.pod import Keys
from extender.kube.client import KubeAPI
from extender.metrics import Metrics


@dataclass(frozen=True, slots=True)
class Handle:
    api: KubeAPI
    domain: str  # settings.resource_domain
    ledger: Ledger
    keys: Keys
    metrics: Metrics
    may_write: Callable[[], bool]
