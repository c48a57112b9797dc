"""The verbs endpoint counts the calls it is deciding or answering (extender.http.verbs), a
bind held at a gang's barrier among them: full garbage collections wait for none in flight."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from extender import wire
from extender.http.verbs import VerbEndpoints
from extender.metrics import Metrics


class HeldBind:
    """Verbs whose bind waits until released, as a gang member's does at the barrier."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def bind(self, args: wire.ExtenderBindingArgs) -> wire.ExtenderBindingResult:
        await self.release.wait()
        return wire.ExtenderBindingResult()


def test_a_call_counts_from_its_arrival_to_its_answer_whatever_the_answer() -> None:
    async def scenario() -> list[tuple[int, int]]:
        verbs = HeldBind()
        endpoints = VerbEndpoints(verbs, Metrics(), lambda: (True, ""))  # type: ignore[arg-type]
        body = msgspec.json.encode(
            {"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "n"}
        )
        statuses: list[int] = []

        def call(path: str, payload: bytes) -> Any:
            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": payload, "more_body": False}

            async def send(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    statuses.append(message["status"])

            scope = {"type": "http", "method": "POST", "path": path, "headers": []}
            return asyncio.create_task(endpoints(scope, receive, send))

        seen = []
        held = [call("/bind", body) for _ in range(3)]
        await asyncio.sleep(0.05)
        seen.append((endpoints.in_flight, len(statuses)))  # held at the barrier
        verbs.release.set()
        await asyncio.gather(*held)
        seen.append((endpoints.in_flight, len(statuses)))
        await call("/bind", b"not json")  # refused (400): counted out all the same
        seen.append((endpoints.in_flight, statuses.count(400)))
        return seen

    assert asyncio.run(scenario()) == [(3, 0), (0, 3), (0, 1)]
