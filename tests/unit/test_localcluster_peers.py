"""ClusterSpec's fields for the benchmark's peers: `scheduler_binary` (another kube-scheduler)
and `manifests` (objects such as CRDs created before kube-scheduler starts); both are checked
before anything starts (escher_harness.localcluster.cluster.up,
escher_harness.localcluster.manifests)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from escher_harness.localcluster import ClusterError, ClusterSpec, cluster, up
from escher_harness.localcluster.binaries import Binaries
from escher_harness.localcluster.manifests import Manifest, ManifestError, load_manifests

CRD = """\
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: podgroups.scheduling.x-k8s.io
---
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: gangs
value: 1000
"""


class Stop(Exception):
    """Raised by the stand-in for cluster._start once it has recorded what `up` prepared."""


@pytest.fixture
def prepared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Fake control-plane binaries, and `up` stopped just before it would start them: the
    returned dict receives the binaries and manifests `up` hands on."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("etcd", "kube-apiserver", "kube-scheduler", "kwok"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 1\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("ESCHER_BIN_DIR", str(bin_dir))
    seen: dict[str, Any] = {"bin_dir": bin_dir}

    def start(
        spec: ClusterSpec,
        cdir: Any,
        created_dir: bool,
        binaries: Binaries,
        user_config: Any,
        manifests: tuple[Manifest, ...],
        *rest: Any,
    ) -> None:
        seen.update(binaries=binaries, manifests=manifests)
        raise Stop

    monkeypatch.setattr(cluster, "_start", start)
    return seen


def executable(path: Path) -> Path:
    path.write_text("#!/bin/sh\nexit 1\n")
    path.chmod(0o755)
    return path


def test_defaults_keep_the_usual_scheduler_and_create_nothing(
    tmp_path: Path, prepared: dict[str, Any]
) -> None:
    spec = ClusterSpec(dir=tmp_path / "c")
    assert spec.scheduler_binary is None
    assert spec.manifests == ()
    with pytest.raises(Stop):
        up(spec)
    assert prepared["binaries"].kube_scheduler == prepared["bin_dir"] / "kube-scheduler"
    assert prepared["manifests"] == ()


def test_scheduler_binary_replaces_only_kube_scheduler(
    tmp_path: Path, prepared: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    peer = executable(tmp_path / "kube-scheduler-plugins")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Stop):
        up(ClusterSpec(dir=tmp_path / "c", scheduler_binary=Path("kube-scheduler-plugins")))
    binaries = prepared["binaries"]
    assert binaries.kube_scheduler == peer  # made absolute: the process runs from elsewhere
    assert binaries.kube_apiserver == prepared["bin_dir"] / "kube-apiserver"
    assert binaries.etcd == prepared["bin_dir"] / "etcd"


@pytest.mark.parametrize("executable_bit", [False, True])
def test_unusable_scheduler_binary_fails_before_anything_starts(
    tmp_path: Path, prepared: dict[str, Any], executable_bit: bool
) -> None:
    missing = tmp_path / "kube-scheduler-plugins"
    if executable_bit:
        missing.mkdir()  # executable, but a directory
    else:
        missing.write_text("not executable")
    with pytest.raises(
        ClusterError, match=re.escape(f"scheduler_binary {missing} is not an executable")
    ):
        up(ClusterSpec(dir=tmp_path / "c", scheduler_binary=missing))
    assert not (tmp_path / "c").exists()
    assert "binaries" not in prepared


def test_manifests_are_loaded_in_order_before_anything_starts(
    tmp_path: Path, prepared: dict[str, Any]
) -> None:
    first = tmp_path / "crd.yaml"
    first.write_text(CRD)
    second = tmp_path / "ns.yaml"
    second.write_text("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: gangs\n")
    with pytest.raises(Stop):
        up(ClusterSpec(dir=tmp_path / "c", manifests=(first, second)))
    manifests = prepared["manifests"]
    assert [(m.source, m.body["kind"], m.name, m.is_crd) for m in manifests] == [
        (first, "CustomResourceDefinition", "podgroups.scheduling.x-k8s.io", True),
        (first, "PriorityClass", "gangs", False),
        (second, "Namespace", "gangs", False),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "cannot read manifest"),
        ("kind: [unclosed", "is not valid YAML"),
        ("- a list\n", "document 1: not a Kubernetes object"),
        ("apiVersion: v1\nkind: Namespace\n", "document 1: not a Kubernetes object"),
        (CRD + "---\nkind: Namespace\nmetadata: {name: x}\n", "document 4: not a Kubernetes"),
    ],
)
def test_invalid_manifest_fails_before_anything_starts(
    tmp_path: Path, prepared: dict[str, Any], text: str | None, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    if text is not None:
        path.write_text(text)
    where = re.escape(str(path))
    with pytest.raises(ClusterError, match=f"{where}.*{message}|{message}.*{where}"):
        up(ClusterSpec(dir=tmp_path / "c", manifests=(path,)))
    assert not (tmp_path / "c").exists()
    assert "manifests" not in prepared


def test_load_manifests_names_the_file_of_a_bad_document(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(CRD)
    bad = tmp_path / "bad.yaml"
    bad.write_text("just a string\n")
    with pytest.raises(ManifestError, match=re.escape(f"manifest {bad}, document 1")):
        load_manifests([good, bad])
