"""Binder: reads pods and binds them to nodes through the API server (the extender's bind).

kube-scheduler delegates binding to the extender (bindVerb), which must then create the
`pods/binding` subresource itself. Called by extender.verbs on the bind path; every failure
comes back as one typed BindError whose message says what happened.

Responses are read raw (`_preload_content=False`): faster than building client models, and it
sidesteps the python client's known failure to deserialize the reply to a binding (a Status,
not a Binding).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Literal, cast

import urllib3
from kubernetes.client import ApiClient, CoreV1Api, V1Binding, V1ObjectMeta, V1ObjectReference
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

_REQUEST_TIMEOUT = (5.0, 30.0)

BindFailure = Literal["pod_gone", "conflict", "unreachable", "refused"]


class BindError(Exception):
    """Reading or binding a pod failed.

    `reason`: pod_gone (404), conflict (409: already bound, being deleted, or a different pod
    now has the name), unreachable (no answer from the API server), refused (anything else).
    """

    def __init__(self, message: str, reason: BindFailure, status: int | None = None) -> None:
        super().__init__(message)
        self.reason: BindFailure = reason
        self.status = status


class Binder:
    def __init__(self, api: ApiClient) -> None:
        self._core = CoreV1Api(api)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        """The pod as a plain JSON object."""
        what = f"reading pod {namespace}/{name}"
        try:
            resp = cast(
                urllib3.HTTPResponse,
                self._core.read_namespaced_pod(
                    name, namespace, _preload_content=False, _request_timeout=_REQUEST_TIMEOUT
                ),
            )
            try:
                pod = json.loads(resp.data)
            finally:
                resp.release_conn()
        except Exception as e:
            raise _bind_error(what, e) from e
        if not isinstance(pod, dict):
            raise BindError(f"{what}: the API server did not return an object", "refused")
        return pod

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Bind the pod `namespace/name` to `node`, only if it is still the pod with `uid`
        (the API server checks the Binding's uid as a precondition)."""
        body = V1Binding(
            metadata=V1ObjectMeta(name=name, namespace=namespace, uid=uid),
            target=V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        what = f"binding pod {namespace}/{name} to {node}"
        try:
            resp = cast(
                urllib3.HTTPResponse,
                self._core.create_namespaced_pod_binding(
                    name, namespace, body, _preload_content=False, _request_timeout=_REQUEST_TIMEOUT
                ),
            )
            resp.drain_conn()
            resp.release_conn()
        except Exception as e:
            raise _bind_error(what, e) from e
        log.debug("pod bound", extra={"pod": f"{namespace}/{name}", "uid": uid, "node": node})


def _bind_error(what: str, e: Exception) -> BindError:
    if isinstance(e, ApiException) and e.status:
        detail = _status_message(e)
        if e.status == 404:
            return BindError(f"{what}: the pod is gone ({detail})", "pod_gone", 404)
        if e.status == 409:
            return BindError(f"{what}: conflict: {detail}", "conflict", 409)
        return BindError(f"{what}: refused with HTTP {e.status}: {detail}", "refused", e.status)
    if isinstance(e, ApiException | urllib3.exceptions.HTTPError | OSError):
        # ApiException without a status is the client's wrapping of a TLS failure.
        return BindError(f"{what}: the API server is unreachable: {e}", "unreachable")
    return BindError(f"{what}: {type(e).__name__}: {e}", "refused")


def _status_message(e: ApiException) -> str:
    """The message of the Status object the API server answered with, else its reason."""
    try:
        msg = json.loads(e.body or "")["message"]
        if isinstance(msg, str) and msg:
            return msg
    except (ValueError, TypeError, KeyError):
        pass
    return str(e.reason or "no details")
