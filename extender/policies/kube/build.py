"""The policy feature's Kubernetes side, built from its args: called by extender.cluster.build
in every mode that talks to the API.

With args.objects, the object store that keeps policies as EphemeralResource and ESL objects
(reconciled by the leader) and that the policy API is a façade over; else none, and the
service keeps them in memory (extender.policies.store).
"""

from __future__ import annotations

from extender.esl.registry import Instances
from extender.kube.handle import Handle
from extender.policies.args import PolicyArgs
from extender.policies.kube.esls import BackendFactory
from extender.policies.kube.objectstore import ObjectStore
from extender.policies.store import WaitDurable


def build(
    args: PolicyArgs,
    handle: Handle,
    esls: Instances,
    esl_backend: BackendFactory,
    wait: WaitDurable,
) -> ObjectStore | None:
    if not args.objects:
        return None
    h = handle
    return ObjectStore(
        h.api,
        h.ledger,
        h.domain,
        h.metrics,
        esls,
        esl_backend,
        wait,
        h.may_write,
        args.resync_seconds,
    )
