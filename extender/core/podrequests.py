"""What a pod requests, exactly as kube-scheduler v1.37.2 computes it for NodeResourcesFit.

A port of k8s.io/component-helpers' resource.PodRequests with the options NodeResourcesFit's
computePodResourceRequest uses for a pod being scheduled (PodLevelResources on, no status
resources: the pod is not running yet):

- the regular containers' requests are summed;
- init containers run one after another before them: each non-restartable one needs its own
  requests plus every restartable (sidecar, `restartPolicy: Always`) init container started
  before it; sidecars keep running, so their requests are also added to the sum; the pod needs
  the larger of the sum and the largest init-time need, per resource;
- pod-level `spec.resources.requests`, when set for cpu, memory or hugepages, replace the
  containers' aggregate for those resources;
- `spec.overhead` is added.

Quantities are summed exactly (extender.core.quantity) and converted to the ledger's units
once, at the end, as kube-scheduler converts the summed Quantity. A container's request
defaults to its limit, as the API server's defaulting makes it (a no-op for the pods
kube-scheduler sends, which were defaulted when created). `pods: 1` is added: NodeResourcesFit
counts the pod itself against the node's pod capacity. Left out on purpose: resources of
running pods' container statuses (in-place resize) and DRA node-allocatable claims, which
the extender does not track. Errors are InvalidQuantity naming the field. Called by
extender.core.pod (every pod the extender reads) and the pure approach's backend. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from extender.core import quantity
from extender.core.objects import PodSpec, ResourceRequirements

Exact = dict[str, Fraction]

_POD_LEVEL = ("cpu", "memory")


def _pod_level(resource: str) -> bool:
    """component-helpers' IsSupportedPodLevelResource."""
    return resource in _POD_LEVEL or resource.startswith("hugepages-")


def _requests(res: ResourceRequirements, where: str) -> Exact:
    out: Exact = {}
    for section, values in (("limits", res.limits), ("requests", res.requests)):
        for r, text in values.items():  # requests win over the limits they default from
            field = f"{where}.resources.{section}[{r}]"
            value = quantity.parse(text, field=field)
            if quantity.is_integer(r) and value.denominator != 1:
                raise quantity.InvalidQuantity(field, text, f"must be a whole number of {r}")
            out[r] = value
    return out


def _add(into: Exact, more: Mapping[str, Fraction]) -> None:
    for r, v in more.items():
        # No Fraction(0) + v for a first value: Fraction arithmetic is the costly part of
        # reading a pod, and every pod event reads one.
        into[r] = into[r] + v if r in into else v


def _max(into: Exact, more: Mapping[str, Fraction]) -> None:
    for r, v in more.items():
        if r not in into or v > into[r]:
            into[r] = v


def exact_requests(spec: PodSpec) -> Exact:
    """PodRequests as exact quantities, before conversion to the ledger's units."""
    total: Exact = {}
    for i, c in enumerate(spec.containers):
        _add(total, _requests(c.resources, f"spec.containers[{i}]"))
    sidecars: Exact = {}
    init: Exact = {}
    for i, c in enumerate(spec.init_containers):
        own = _requests(c.resources, f"spec.initContainers[{i}]")
        if c.restart_policy == "Always":
            _add(total, own)
            _add(sidecars, own)
            need = dict(sidecars)
        else:
            need = dict(own)
            _add(need, sidecars)
        _max(init, need)
    _max(total, init)
    if spec.resources is not None and any(_pod_level(r) for r in spec.resources.requests):
        for r, text in spec.resources.requests.items():
            if _pod_level(r):
                total[r] = quantity.parse(text, field=f"spec.resources.requests[{r}]")
    for r, text in spec.overhead.items():
        _add(total, {r: quantity.parse(text, field=f"spec.overhead[{r}]")})
    return total


def pod_requests(spec: PodSpec) -> dict[str, int]:
    """What the pod occupies on its node, in the ledger's units (cpu in millicores, bytes,
    units), zero amounts left out, `pods: 1` included."""
    out: dict[str, int] = {}
    for r, v in exact_requests(spec).items():
        # Rounded up, in integers (exact, and cheaper than Fraction arithmetic).
        n = -((-v.numerator * (1000 if r == "cpu" else 1)) // v.denominator)
        if n > quantity.MAX:
            raise quantity.InvalidQuantity(f"spec (sum of {r})", v, "is above 2^63-1")
        if n:
            out[r] = n
    out["pods"] = 1
    return out
