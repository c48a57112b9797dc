"""GateSwitch: tells the adaptive gang-gate admission policy whether to hold new gang members.

The policy (deploy/overlays/extender/gang-gate-policy.yaml) reads one ConfigMap as its
parameter and gates a new member only while its `data.hold` is "true". The service decides
(extender.service: hold while some gang waits for room, and for a cool-down after); this
writes the decision, only while this replica may write, one write at a time, and only when
it differs from what was last written (a failed write is retried at the next `set`).
The ConfigMap is created if missing. `escher_gang_gate_hold` says what was last written.
Created and called by extender.service.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import msgspec

from extender.gang.args import GangArgs
from extender.kube.client import ApiError, KubeAPI, merge_patch
from extender.metrics import Metrics

log = logging.getLogger(__name__)


class GateSwitch:
    def __init__(
        self, api: KubeAPI, args: GangArgs, metrics: Metrics, may_write: Callable[[], bool]
    ) -> None:
        self._api = api
        self._namespace, self._name = args.gate_switch.split("/", 1)
        self._gauge = metrics.gang_gate_hold
        self._may_write = may_write
        self._written: bool | None = None  # None: not known to be written (start, failure)
        self._task: asyncio.Task[None] | None = None

    def set(self, hold: bool) -> None:
        """Make the ConfigMap say `hold`, unless it already does or a write is under way."""
        if hold is self._written or not self._may_write():
            return
        if self._task is not None and not self._task.done():
            return  # the next set after it ends writes the then-wanted value
        self._task = asyncio.get_running_loop().create_task(self._write(hold))

    def forget(self) -> None:
        """On losing the lead: the next leader (maybe this replica again) writes anew."""
        self._written = None

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _write(self, hold: bool) -> None:
        value = "true" if hold else "false"
        path = f"/api/v1/namespaces/{self._namespace}/configmaps"
        what = f"setting {self._namespace}/{self._name} hold={value}"
        body, content_type = merge_patch({"data": {"hold": value}})
        try:
            try:
                await self._api.request(
                    "PATCH", f"{path}/{self._name}", body=body, content_type=content_type, what=what
                )
            except ApiError as e:
                if e.status != 404:
                    raise
                config_map = {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": self._name, "namespace": self._namespace},
                    "data": {"hold": value},
                }
                await self._api.request(
                    "POST", path, body=msgspec.json.encode(config_map), what=what
                )
        except ApiError as e:
            self._written = None
            log.warning("gang gate switch not written", extra={"hold": hold, "error": str(e)})
            return
        self._written = hold
        self._gauge.set(1 if hold else 0)
        log.info("gang gate switched", extra={"hold": hold})
