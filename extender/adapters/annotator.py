"""Gang wake-ups: annotate gang members' pods with their reserved node, in the background.

The annotation does two things: the pod update makes kube-scheduler retry a member it had
parked as unschedulable (so the gang's other members are scheduled at once when it is
reserved), and it records the reservation on the pod, from which a restarted extender
rebuilds it (`reserved_members`). Called by the service (extender.service) with the wakes
the gang filter and the expiry loop return.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from extender.gang import COSCHEDULING_LABEL, Keys, Wake

log = logging.getLogger(__name__)

_ATTEMPTS = 5


class PodAnnotator:
    def __init__(self, api: client.ApiClient, keys: Keys, on_gone: Callable[[str], None]) -> None:
        self.core = client.CoreV1Api(api)
        self.keys = keys
        self.on_gone = on_gone
        self._queue: queue.Queue[Wake | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.writes = 0  # API writes made, for benchmarks

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gang-annotator", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=5)

    def send(self, wakes: list[Wake]) -> None:
        """Queue wake-ups; never blocks (called from the filter path)."""
        for w in wakes:
            self._queue.put(w)

    def _run(self) -> None:
        while (w := self._queue.get()) is not None:
            self._patch(w)

    def _patch(self, w: Wake) -> None:
        annotations = {
            self.keys.node: w.node,
            self.keys.until: None if w.until is None else f"{w.until:.3f}",
        }
        body = {"metadata": {"annotations": annotations}}
        for attempt in range(_ATTEMPTS):
            try:
                self.core.patch_namespaced_pod(w.name, w.namespace, body)
                self.writes += 1
                return
            except ApiException as e:
                if e.status == 404:
                    self.on_gone(w.uid)
                    return
                log.warning(
                    "annotating a gang member failed",
                    extra={"pod": f"{w.namespace}/{w.name}", "status": e.status},
                )
            except Exception as e:  # connection errors: the API server may be restarting
                log.warning(
                    "annotating a gang member failed",
                    extra={"pod": f"{w.namespace}/{w.name}", "error": str(e)},
                )
            time.sleep(0.1 * 2**attempt)

    def reserved_members(self) -> list[dict[str, Any]]:
        """Unbound pods of gangs that carry a reservation annotation (after a restart)."""
        out: list[dict[str, Any]] = []
        for label in (self.keys.gang, COSCHEDULING_LABEL):
            raw: Any = self.core.list_pod_for_all_namespaces(
                label_selector=label,
                field_selector="spec.nodeName=",
                _preload_content=False,
            )
            for pod in json.loads(raw.data)["items"]:
                if self.keys.node in (pod["metadata"].get("annotations") or {}):
                    out.append(pod)
        return out
