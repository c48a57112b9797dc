"""The adaptive gang gate as deploy/ runs it, for a local cluster (ClusterSpec.gang_gate).

deploy/'s MutatingAdmissionPolicy (overlays/extender/gang-gate-policy.yaml) and its binding,
read from that file and changed only where a local cluster differs: the schedulerName its
pods use, and the namespace of the switch (the ConfigMap the extender writes, `default`
here). SWITCH is what the extender is told to write (ESCHER_GANG_GATE_SWITCH). Called by
escher_harness.localcluster.cluster.up.
"""

from __future__ import annotations

from escher_harness.localcluster.manifests import Manifest, for_scheduler, load_manifests
from escher_harness.localcluster.paths import REPO_ROOT

POLICY = REPO_ROOT / "deploy" / "overlays" / "extender" / "gang-gate-policy.yaml"
NAMESPACE = "default"


def switch_name() -> str:
    """`<namespace>/<name>` of the switch the local extender writes."""
    (binding,) = [m for m in load_manifests([POLICY]) if "paramRef" in m.body.get("spec", {})]
    return f"{NAMESPACE}/{binding.body['spec']['paramRef']['name']}"


def manifests(scheduler_name: str) -> tuple[Manifest, ...]:
    out = []
    for m in load_manifests([POLICY]):
        body = for_scheduler(m.body, scheduler_name)
        if "paramRef" in body["spec"]:
            body["spec"]["paramRef"]["namespace"] = NAMESPACE
        out.append(Manifest(m.source, body))
    return tuple(out)
