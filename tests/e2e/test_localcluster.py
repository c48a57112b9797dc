"""End-to-end tests of the local control plane: real etcd, kube-apiserver, kube-scheduler and
kwok.

A pod is bound by the real scheduler onto fake nodes that kwok has taken over; `down` leaves no
process behind, with kwok or without; bad input (missing binary, taken port, unwritable
directory, a scheduler config kube-scheduler rejects) fails with a clear message and no process
left. What kwok does to pods and nodes is tests/e2e/test_kwok.py's.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from escher_harness.kubeclient import api_client
from escher_harness.localcluster import (
    ClusterError,
    ClusterInfo,
    ClusterSpec,
    MissingBinaryError,
    down,
    load,
    ports,
    restart_component,
    status,
    up,
)
from escher_harness.localcluster.binaries import bin_dir
from escher_harness.localcluster.cpus import CpuSplit
from escher_harness.pytest_plugin import ClusterFactory

pytestmark = pytest.mark.e2e


def processes_mentioning(text: str) -> list[str]:
    """`ps` lines whose command line mentions `text` (e.g. a cluster directory)."""
    # ww: full command lines; ps truncates them to 80 columns when writing to a pipe.
    out = subprocess.run(["ps", "-eww", "-o", "pid,args"], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines()[1:] if text in line and "ps -eww" not in line]


def create_pod(core: client.CoreV1Api, resources: dict[str, str] | None = None) -> str:
    name = f"p-{uuid.uuid4().hex[:8]}"
    core.create_namespaced_pod(
        "default",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "100m"}, "limits": resources or {}},
                    }
                ]
            },
        },
    )
    return name


def wait_bound(core: client.CoreV1Api, name: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod(name, "default")
        if pod.spec.node_name:
            return str(pod.spec.node_name)
        time.sleep(0.1)
    raise AssertionError(f"pod {name} not bound after {timeout}s: {pod.status}")


def wait_unschedulable(core: client.CoreV1Api, name: str, timeout: float = 30.0) -> str:
    """The scheduler's message once it has marked the pod unschedulable."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod(name, "default")
        assert not pod.spec.node_name, f"pod {name} was bound to {pod.spec.node_name}"
        for cond in pod.status.conditions or []:
            if cond.type == "PodScheduled" and cond.reason == "Unschedulable":
                return str(cond.message)
        time.sleep(0.1)
    raise AssertionError(f"pod {name} not marked unschedulable after {timeout}s")


def test_scheduler_binds_a_pod_to_a_fake_node(shared_cluster: ClusterInfo) -> None:
    with api_client(shared_cluster.kubeconfig) as api:
        core = client.CoreV1Api(api)
        nodes = core.list_node().items
        assert sorted(n.metadata.name for n in nodes) == ["node-0", "node-1", "node-2"]
        node = nodes[0]
        assert node.status.capacity == node.status.allocatable
        assert node.status.capacity["pods"] == "110"
        assert node.metadata.labels["kubernetes.io/hostname"] == node.metadata.name
        assert not node.spec.taints
        # Taken over by kwok: Running, its kubelet version, a kubelet's node conditions.
        assert node.status.phase == "Running"
        assert node.status.node_info.kubelet_version.startswith("kwok-")
        conditions = {c.type: c.status for c in node.status.conditions}
        assert conditions.pop("Ready") == "True" and set(conditions.values()) == {"False"}

        name = create_pod(core)
        assert wait_bound(core, name) in shared_cluster.nodes


def test_nodes_carry_labels_and_extended_resources(local_cluster: ClusterFactory) -> None:
    info = local_cluster(
        nodes=2,
        node_cpu="4",
        node_labels={"zone": "a"},
        node_resources={"example.com/gpu": "1"},
    )
    with api_client(info.kubeconfig) as api:
        core = client.CoreV1Api(api)
        for node in core.list_node().items:
            assert node.metadata.labels["zone"] == "a"
            assert node.status.allocatable["cpu"] == "4"
            assert node.status.allocatable["example.com/gpu"] == "1"
        # NodeResourcesFit enforces the extended resource: 1 fits, 2 fit nowhere.
        assert wait_bound(core, create_pod(core, {"example.com/gpu": "1"})) in info.nodes
        message = wait_unschedulable(core, create_pod(core, {"example.com/gpu": "2"}))
        assert "Insufficient example.com/gpu" in message


def test_cluster_json_and_status(local_cluster: ClusterFactory) -> None:
    info = local_cluster(nodes=1)
    saved = json.loads((info.dir / "cluster.json").read_text())
    assert saved["kubeconfig"] == str(info.kubeconfig) and Path(saved["kubeconfig"]).is_absolute()
    assert saved["apiserver"] == info.apiserver
    assert saved["mode"] == "none" and saved["scheduler_name"] == "default-scheduler"
    assert saved["nodes"] == ["node-0"]
    assert saved["extender_url"] is None and saved["token"] is None
    assert set(saved["pids"]) == {"etcd", "kube-apiserver", "kwok", "kube-scheduler"}
    assert load(info.dir) == info

    st = status(info.dir)
    assert st.ready and st.healthy
    assert [c.name for c in st.components] == ["etcd", "kube-apiserver", "kwok", "kube-scheduler"]
    assert all(c.alive and c.rss_bytes > 0 for c in st.components)
    assert st.total_rss_bytes == sum(c.rss_bytes for c in st.components)
    assert {c.name: c.pid for c in st.components} == info.pids


@pytest.mark.parametrize(("kwok", "processes"), [(True, 4), (False, 3)], ids=["kwok", "no-kwok"])
def test_down_leaves_no_process_and_no_data(tmp_path: Path, kwok: bool, processes: int) -> None:
    d = tmp_path / "cluster"
    try:
        info = up(ClusterSpec(dir=d, nodes=1, kwok=kwok))
        assert len(processes_mentioning(str(d))) == processes
        assert ("kwok" in info.pids) is kwok
        assert info.dir == d and (d / "etcd").is_dir()
        claimed = ports.claimed(d / "processes.json")
        # Every port up chose (all but the fixed ones: none here) is claimed for this cluster.
        assert sorted(claimed) == sorted(info.ports.values()), (claimed, info.ports)
    finally:
        down(d)
    assert ports.claimed(d / "processes.json") == []  # released
    assert processes_mentioning(str(d)) == []
    assert not d.exists()  # `up` created it, so `down` removes it
    down(d)  # idempotent
    with pytest.raises(ClusterError, match="no cluster"):
        status(d)


def test_cli_up_status_down(tmp_path: Path) -> None:
    d = tmp_path / "cli"
    cli = [sys.executable, "-m", "extender", "cluster"]
    try:
        r = subprocess.run(
            [*cli, "up", "--dir", str(d), "--nodes", "2"],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert r.returncode == 0, r.stderr
        assert "cluster ready in" in r.stdout and "2 nodes" in r.stdout
        # The cluster outlives the command that started it.
        assert len(processes_mentioning(str(d))) == 4

        r = subprocess.run(
            [*cli, "status", "--dir", str(d), "--json"], capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert json.loads(r.stdout)["healthy"] is True
    finally:
        r = subprocess.run([*cli, "down", "--dir", str(d)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert processes_mentioning(str(d)) == []


def test_kwok_exiting_fails_the_start_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real control plane, and a kwok that refuses to start.
    real = bin_dir()
    bins = tmp_path / "bin"
    bins.mkdir()
    for name in ("etcd", "kube-apiserver", "kube-scheduler"):
        (bins / name).symlink_to(real / name)
    (bins / "kwok").write_text("#!/bin/sh\necho 'no stages found' >&2\nexit 3\n")
    (bins / "kwok").chmod(0o755)
    monkeypatch.setenv("ESCHER_BIN_DIR", str(bins))
    d = tmp_path / "cluster"
    with pytest.raises(ClusterError) as e:
        up(ClusterSpec(dir=d, nodes=2))
    assert str(e.value).startswith("kwok exited during start-up with exit code 3")
    assert "no stages found" in str(e.value)
    assert processes_mentioning(str(d)) == []


def test_missing_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("ESCHER_BIN_DIR", str(empty))
    d = tmp_path / "cluster"
    with pytest.raises(MissingBinaryError) as e:
        up(ClusterSpec(dir=d))
    assert "etcd" in str(e.value) and str(empty) in str(e.value)
    assert "make binaries" in str(e.value) and "ESCHER_BIN_DIR" in str(e.value)
    assert not d.exists()


def test_cli_error_is_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "ESCHER_BIN_DIR": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, "-m", "extender", "cluster", "up", "--dir", str(tmp_path / "c")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("escher-extender cluster up: etcd not found")


def test_port_taken(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        d = tmp_path / "cluster"
        with pytest.raises(ClusterError, match=f"port {port} wanted by apiserver"):
            up(ClusterSpec(dir=d, apiserver_port=port))
    assert processes_mentioning(str(d)) == []


def test_unwritable_dir(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("")
    d = a_file / "cluster"  # a directory cannot be made inside a regular file
    with pytest.raises(ClusterError, match=r"cannot use .* as the cluster directory"):
        up(ClusterSpec(dir=d))
    assert processes_mentioning(str(d)) == []
    assert ports.claimed(d / "processes.json") == []  # the ports it chose are free for others again


def test_scheduler_config_kube_scheduler_rejects(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    # Well-formed YAML with the right apiVersion, so only kube-scheduler's validation catches it.
    config.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "percentageOfNodesToScore: 150\n"
    )
    d = tmp_path / "cluster"
    with pytest.raises(ClusterError) as e:
        up(ClusterSpec(dir=d, nodes=1, scheduler_config=config))
    message = str(e.value)
    assert message.startswith("kube-scheduler exited during start-up")
    assert "percentageOfNodesToScore" in message  # from the log tail
    assert processes_mentioning(str(d)) == []
    assert (d / "logs" / "kube-scheduler.log").exists()  # kept to debug the failure


def allowed_cpus(pid: int) -> frozenset[int]:
    """A process's CPUs, from /proc (independent of the code under test)."""
    return frozenset(os.sched_getaffinity(pid))


def autogroup_nice(pid: int) -> int:
    """The nice of a process's session's autogroup, from /proc (independent of the code under
    test)."""
    return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])


def test_a_cpu_split_and_the_extenders_share_are_kept_by_a_restart(
    local_cluster: ClusterFactory,
) -> None:
    """The schedulers run apart from the rest, the extender at its own share (a positive nice
    needs no privilege: its share is smaller, which the test does not mind), and a restarted
    component keeps both."""
    split = CpuSplit.halves()
    info = local_cluster(nodes=1, mode="extender", cpu_split=split, extender_nice=3)
    expected = {name: split.rest for name in info.pids}
    expected.update(extender=split.scheduling, **{"kube-scheduler": split.scheduling})
    assert {name: allowed_cpus(pid) for name, pid in info.pids.items()} == expected
    nices = {name: 3 if name == "extender" else 0 for name in info.pids}
    assert {name: autogroup_nice(pid) for name, pid in info.pids.items()} == nices
    with api_client(info.kubeconfig) as api:
        core = client.CoreV1Api(api)
        assert wait_bound(core, create_pod(core)) in info.nodes
        restarted = restart_component(info.dir, "kube-scheduler")
        assert allowed_cpus(restarted.pids["kube-scheduler"]) == split.scheduling
        assert autogroup_nice(restarted.pids["kube-scheduler"]) == 0
        restarted = restart_component(info.dir, "extender")
        assert allowed_cpus(restarted.pids["extender"]) == split.scheduling
        assert autogroup_nice(restarted.pids["extender"]) == 3
        assert wait_bound(core, create_pod(core)) in info.nodes
