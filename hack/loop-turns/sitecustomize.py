"""Which callbacks fill the extender's long event-loop turns (a diagnostic, not a figure).

The loop's lag and the probe's stall say how long the loop was held, and the watchdog
(extender.loopwatch) what one stack was then; neither says what a long turn was made of. Put
this directory first on PYTHONPATH and set ESCHER_LOOP_TURNS_DIR, and the extender's serving
process (only it: `extender ... serve` in its command line) records every turn of its event
loop that used more than ESCHER_LOOP_TURNS_MS (15) ms of its thread's CPU, as one JSON line
in DIR/turns-<pid>.jsonl: when (monotonic s), cpu_ms, wall_ms, gc_ms, the number of
callbacks, and the callbacks grouped by kind with their count and CPU. A task's kind is its
coroutine chain where it resumed (`_handle>...>Verbs._bind:291`), a plain callback's its
name. summary.py, beside this file, reads the directory.

To name the task behind each callback it runs the standard asyncio loop (not uvloop) with
pure-Python tasks, and timing every callback costs more again: the turns are longer than in
a normal run, so read what fills them, not their length.

    PYTHONPATH=hack/loop-turns ESCHER_LOOP_TURNS_DIR=out/turns \
        .venv/bin/escher-extender bench gang --preset topology --scenarios preferred \
        --repeat 1 --approaches extender-adaptive --out out/turns-run
    .venv/bin/python hack/loop-turns/summary.py out/turns
"""

from __future__ import annotations

import os
import sys


def _install(out_dir: str, threshold_ms: float) -> None:
    import asyncio
    import asyncio.base_events as base_events
    import asyncio.events as events
    import asyncio.tasks as tasks
    import collections
    import gc
    import json
    import time
    from typing import Any

    import uvloop

    def run(main: Any, **_: Any) -> Any:
        return asyncio.run(main)

    uvloop.run = run  # the service's entry point picks uvloop; this needs asyncio's loop
    py_task = tasks._PyTask  # type: ignore[attr-defined]
    tasks.Task = py_task  # type: ignore[misc]
    asyncio.Task = py_task  # type: ignore[misc]

    os.makedirs(out_dir, exist_ok=True)
    sink = open(  # noqa: SIM115 - open for the process's life, line-buffered
        os.path.join(out_dir, f"turns-{os.getpid()}.jsonl"), "a", buffering=1
    )
    gc_time = [0.0, 0.0]  # CPU in collections so far, start of the one running

    def on_gc(phase: str, _: dict[str, int]) -> None:
        if phase == "start":
            gc_time[1] = time.thread_time()
        else:
            gc_time[0] += time.thread_time() - gc_time[1]

    gc.callbacks.append(on_gc)

    def chain(coro: Any, depth: int = 40) -> str:
        parts = []
        while coro is not None and len(parts) < depth:
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
            if frame is None:
                break
            parts.append(f"{frame.f_code.co_qualname}:{frame.f_lineno}")
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        return ">".join(parts)

    turn: list[tuple[str, float]] | None = None
    handle_run = events.Handle._run

    def timed_run(self: events.Handle) -> None:
        if turn is None:
            return handle_run(self)
        task = getattr(self._callback, "__self__", None)  # type: ignore[attr-defined]
        if isinstance(task, py_task):
            kind = "task " + chain(task.get_coro())
        else:
            kind = "call " + getattr(self._callback, "__qualname__", type(self._callback).__name__)  # type: ignore[attr-defined]
        start = time.thread_time()
        handle_run(self)
        turn.append((kind, time.thread_time() - start))

    run_once = base_events.BaseEventLoop._run_once  # type: ignore[attr-defined]

    def timed_run_once(self: base_events.BaseEventLoop) -> None:
        nonlocal turn
        turn = callbacks = []
        gc0, cpu0, wall0 = gc_time[0], time.thread_time(), time.monotonic()
        try:
            run_once(self)
        finally:
            turn = None
        cpu = (time.thread_time() - cpu0) * 1000
        if cpu < threshold_ms:
            return
        kinds: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
        for kind, spent in callbacks:
            kinds[kind][0] += 1
            kinds[kind][1] += spent * 1000
        record = {
            "at": round(wall0, 3),
            "cpu_ms": round(cpu, 2),
            "wall_ms": round((time.monotonic() - wall0) * 1000, 2),
            "gc_ms": round((gc_time[0] - gc0) * 1000, 2),
            "callbacks": len(callbacks),
            "kinds": sorted(
                ([k, int(n), round(ms, 2)] for k, (n, ms) in kinds.items()), key=lambda r: -r[2]
            ),
        }
        sink.write(json.dumps(record) + "\n")

    events.Handle._run = timed_run  # type: ignore[method-assign]
    base_events.BaseEventLoop._run_once = timed_run_once  # type: ignore[attr-defined]


def _threshold_ms() -> float | None:
    raw = os.environ.get("ESCHER_LOOP_TURNS_MS", "15")
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 <= value < float("inf"):
        print(
            f"hack/loop-turns: ESCHER_LOOP_TURNS_MS must be a number of ms >= 0, not {raw!r}; "
            "nothing recorded",
            file=sys.stderr,
        )
        return None
    return value


_DIR = os.environ.get("ESCHER_LOOP_TURNS_DIR")
_ARGV = getattr(sys, "orig_argv", sys.argv)
if _DIR and "serve" in _ARGV and "extender" in _ARGV:  # python -m extender serve ...
    _ms = _threshold_ms()
    if _ms is not None:
        _install(_DIR, _ms)
