"""The marker admission policy as deploy/ runs it, for a local cluster (ClusterSpec.split).

deploy/'s MutatingAdmissionPolicy (overlays/extender/marker-policy.yaml) and its binding, read
from that file and changed only where a local cluster differs: the schedulerName its pods use
and, with another resource domain, the names under it. With it, pods need not know the
markers: a gang member or a pod with a preference is marked at creation, as in a cluster
deployed from deploy/. Called by escher_harness.localcluster.cluster.up.
"""

from __future__ import annotations

from escher_harness.localcluster.config import DEFAULT_RESOURCE_DOMAIN
from escher_harness.localcluster.manifests import Manifest, for_scheduler, load_manifests
from escher_harness.localcluster.paths import REPO_ROOT

POLICY = REPO_ROOT / "deploy" / "overlays" / "extender" / "marker-policy.yaml"


def manifests(scheduler_name: str, domain: str) -> tuple[Manifest, ...]:
    out = []
    for m in load_manifests([POLICY]):
        body = for_scheduler(m.body, scheduler_name)
        spec = body["spec"]
        if domain != DEFAULT_RESOURCE_DOMAIN:
            for entry in (*spec.get("matchConditions", []), *spec.get("variables", [])):
                if entry["name"] != "for-escher-scheduler":
                    entry["expression"] = _in_domain(entry["expression"], domain)
        out.append(Manifest(m.source, body))
    return tuple(out)


def _in_domain(expression: str, domain: str) -> str:
    """The expression's names under `domain`: `"escher.io/...` and `scheduling.escher.io/`."""
    d = DEFAULT_RESOURCE_DOMAIN
    return expression.replace(f'"{d}/', f'"{domain}/').replace(
        f"scheduling.{d}/", f"scheduling.{domain}/"
    )
