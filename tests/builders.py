"""What tests build over and over: a clock moved by hand, pod manifests, gang members, the
pods a gang benchmark approach submits, and the garbage collector's walk (what holding state
costs it).

Every tier imports it (`from builders import ...`: tests/conftest.py puts tests/ on the
path). A manifest is a full Pod as the API server takes it (escher_harness.workload's
pod_manifest, which the benchmarks create too), so the same builder serves a unit test that
decodes it (`info`) and an e2e test that creates it.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from escher_harness.workload import pod_manifest
from extender.core.objects import Pod
from extender.core.pod import Keys, PodInfo, pod_info

KEYS = Keys.for_domain("escher.io")
PREFIX = "escher.io/"


class Clock:
    """A monotonic clock that moves only when told to."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    sleep = advance  # where the code under test sleeps on the clock it was given


def pod(
    name: str = "p",
    *,
    uid: str | None = None,
    namespace: str = "default",
    requests: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    gates: Sequence[str] = (),
    node: str = "",
    phase: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pod manifest; `uid`, `node`, `phase` and extra `spec` fields as the API server
    would show them (an e2e test leaves `uid` out: the API server gives one)."""
    manifest = pod_manifest(
        name,
        limits=limits,
        requests=requests,
        labels=labels,
        annotations=annotations,
        scheduling_gates=gates,
    )
    manifest["metadata"]["namespace"] = namespace
    if uid is not None:
        manifest["metadata"]["uid"] = uid
    if node:
        manifest["spec"]["nodeName"] = node
    manifest["spec"].update(spec)
    if phase is not None:
        manifest["status"] = {"phase": phase}
    return manifest


def member(
    gang: str,
    i: int,
    size: int,
    *,
    cpu: str = "1",
    requests: Mapping[str, str] | None = None,
    timeout: float = 30,
    **more: Any,
) -> dict[str, Any]:
    """Member `i` of a gang of `size` (`<gang>-<i>`), as the gang feature reads one; it
    requests `cpu` and any other `requests`."""
    return pod(
        f"{gang}-{i}",
        requests={"cpu": cpu, **(requests or {})},
        labels={KEYS.gang: gang},
        annotations={KEYS.gang_min: str(size), KEYS.gang_timeout: f"{timeout:g}"},
        **more,
    )


def info(manifest: Mapping[str, Any], keys: Keys = KEYS, prefix: str = PREFIX) -> PodInfo:
    """What the service reads of a manifest (decoded as from the API server, which gives a
    pod without one the uid `<name>-uid`)."""
    meta = manifest["metadata"]
    manifest = {**manifest, "metadata": {"uid": f"{meta['name']}-uid", **meta}}
    decoded = msgspec.json.decode(msgspec.json.encode(manifest), type=Pod)
    return pod_info(decoded, keys, prefix)


def walked() -> int:
    """What a full collection walks: every tracked object, and each tracked container's
    entries (the built-in type's count: a subclass's __len__ may do anything, platform's
    uname_result's runs `uname -p`)."""
    gc.collect()
    return sum(1 + _entries(o) for o in gc.get_objects())


def _entries(o: object) -> int:
    for kind in (list, tuple, set, frozenset, dict):
        if isinstance(o, kind):
            length: Callable[[Any], int] = kind.__len__
            return length(o)
    return 0


def cluster_of(mode: str) -> dict[str, str]:
    """The cluster fields of a test run in every mode. In mode extender these tests exercise
    the extender's verbs for every pod, so kube-scheduler sends it every pod every exchange
    (scope every-pod); tests/e2e/test_split.py and test_deploy.py run the split, the
    embedded cluster's default."""
    return {"mode": mode, "scope": "every-pod"} if mode == "extender" else {"mode": mode}


def submitted_pods(
    monkeypatch: Any, approach: str, job: Any, scheduler_config: str = "extender-split.yaml"
) -> tuple[bool, list[dict[str, Any]]]:
    """What escher_harness.bench.approaches.submit returns for `job` under `approach`, and the
    manifests it would have created, with no cluster: every member is seen bound at once. The
    cluster runs scheduler-config/`scheduler_config` (deploy/'s split by default)."""
    from escher_harness.bench import approaches
    from escher_harness.workload import Workload

    created: list[dict[str, Any]] = []
    monkeypatch.setattr(Workload, "create", lambda self, m: created.append(m))

    class Watch:
        def bound(self, names: Any, timeout: float) -> int:
            return len(names)

    config = Path(__file__).resolve().parents[1] / "scheduler-config" / scheduler_config
    info = type(
        "Info",
        (),
        {
            "resource_domain": "escher.io",
            "scheduler_name": "default-scheduler",
            "paths": {"scheduler_config": config},
        },
    )()
    env = approaches.Env(info, None, Watch(), lambda k, g: None)  # type: ignore[arg-type]
    return approaches.submit(approach, env, job), created
