"""Locust load on the extender's filter or prioritize verb, as kube-scheduler calls it.

One user posts the same ExtenderArgs body back to back (kube-scheduler's scheduling cycle
calls an extender one pod at a time). Each reply's Server-Timing header carries the
server-side latency, which is written to ESCHER_BENCH_TIMINGS when the run stops.
Run by `escher-extender bench extender` (escher_harness.bench.latency); by hand:

  ESCHER_BENCH_VERB=filter ESCHER_BENCH_PAYLOAD=args.json ESCHER_BENCH_TIMINGS=out.json \\
    locust -f loadtests/extender_locustfile.py --headless -u 1 -t 10s --host http://127.0.0.1:8888
"""

from __future__ import annotations

import json
import os
from typing import Any

from locust import constant, events, task
from locust.contrib.fasthttp import FastHttpUser

VERB = os.environ.get("ESCHER_BENCH_VERB", "filter")
PAYLOAD = os.environ.get("ESCHER_BENCH_PAYLOAD", "")
TIMINGS = os.environ.get("ESCHER_BENCH_TIMINGS", "")

_body = open(PAYLOAD, "rb").read() if PAYLOAD else b""  # noqa: SIM115 - read once at import
_server_ms: list[float] = []


class Scheduler(FastHttpUser):
    wait_time = constant(0)

    @task
    def call(self) -> None:
        with self.client.post(
            f"/{VERB}",
            data=_body,
            headers={"Content-Type": "application/json"},
            name=VERB,
            catch_response=True,
        ) as r:
            if r.status_code != 200:
                r.failure(f"HTTP {r.status_code}: {r.text[:200]}")
                return
            timing = r.headers.get("Server-Timing", "")
            if "dur=" not in timing:
                r.failure("no Server-Timing header")
                return
            _server_ms.append(float(timing.split("dur=")[1]))


@events.test_stop.add_listener
def _write(**_: Any) -> None:
    if TIMINGS:
        with open(TIMINGS, "w") as f:
            json.dump(_server_ms, f)
