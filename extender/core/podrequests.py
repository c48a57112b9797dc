"""What a pod requests (temporary: replaced by the exact port being written on its branch)."""

from __future__ import annotations

from extender.core.objects import Container, PodSpec
from extender.core.quantity import amount


def _container(c: Container, where: str) -> dict[str, int]:
    merged = dict(c.resources.limits)
    merged.update(c.resources.requests)
    return {r: amount(r, q, field=f"{where}.resources.requests[{r}]") for r, q in merged.items()}


def pod_requests(spec: PodSpec) -> dict[str, int]:
    total: dict[str, int] = {}
    for i, c in enumerate(spec.containers):
        for r, v in _container(c, f"spec.containers[{i}]").items():
            total[r] = total.get(r, 0) + v
    for i, c in enumerate(spec.init_containers):
        for r, v in _container(c, f"spec.initContainers[{i}]").items():
            total[r] = max(total.get(r, 0), v)
    for r, q in spec.overhead.items():
        total[r] = total.get(r, 0) + amount(r, q, field=f"spec.overhead[{r}]")
    total["pods"] = 1
    return {k: v for k, v in total.items() if v}
