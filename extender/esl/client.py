"""A typed client of the extender's policy API (ESCHER's set_resource / get_cluster_state).

Used by ESLs, the demo, benchmarks and tests; speaks HTTP only (httpx), so it works against
any running extender, local or in a cluster. Errors the server names come back as
PolicyAPIError carrying the status, the message and the field.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import httpx

from extender.policies.api import (
    ClusterState,
    DeleteResourceResult,
    ResourceSpec,
    ResourceState,
    SetResourceResult,
)


class PolicyAPIError(Exception):
    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        self.status = status
        self.field = field
        super().__init__(f"{status}: {message}")


class PolicyClient:
    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout: float = 30.0,
        verify: bool | str | ssl.SSLContext = True,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """`verify`: True (system CAs), False, a CA bundle path, or an SSL context.
        `transport`: httpx's own by default; tests pass one that reaches the app in-process."""
        if isinstance(verify, str):  # httpx wants a context, not a path
            verify = ssl.create_default_context(cafile=verify)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=base_url, headers=headers, timeout=timeout, verify=verify, transport=transport
        )

    def __enter__(self) -> PolicyClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, json: Any = None) -> Any:
        r = self._http.request(method, path, json=json)
        if r.status_code >= 400:
            try:
                body = r.json()
                raise PolicyAPIError(r.status_code, body.get("error", r.text), body.get("field"))
            except ValueError:
                raise PolicyAPIError(r.status_code, r.text) from None
        return r.json()

    def set_resource(
        self,
        name: str,
        capacity: int,
        *,
        node: str | None = None,
        node_selector: Mapping[str, str] | None = None,
        node_spec: Mapping[str, str | int] | None = None,
        num_nodes: int | None = None,
    ) -> SetResourceResult:
        """ESCHER's set_resource. `name` is the short name; pods request the result's
        `resource` (<domain>/<name>). Capacity 0 removes it from the matching nodes."""
        spec = ResourceSpec(
            capacity=capacity,
            node=node,
            node_selector=dict(node_selector) if node_selector is not None else None,
            node_spec=dict(node_spec) if node_spec is not None else None,
            num_nodes=num_nodes,
        )
        return self.put_resource(name, spec)

    def put_resource(self, name: str, spec: ResourceSpec) -> SetResourceResult:
        """PUT /v1/resources/{name} with a ResourceSpec."""
        body = spec.model_dump(exclude_none=True)
        return SetResourceResult.model_validate(self._call("PUT", f"/v1/resources/{name}", body))

    def delete_resource(self, name: str, force: bool = False) -> DeleteResourceResult:
        """Remove the resource everywhere; refused (409) while pods hold it unless `force`."""
        path = f"/v1/resources/{name}" + ("?force=true" if force else "")
        return DeleteResourceResult.model_validate(self._call("DELETE", path))

    def get_resource(self, name: str) -> ResourceState:
        return ResourceState.model_validate(self._call("GET", f"/v1/resources/{name}"))

    def cluster_state(self) -> ClusterState:
        """ESCHER's get_cluster_state."""
        return ClusterState.model_validate(self._call("GET", "/v1/cluster-state"))
