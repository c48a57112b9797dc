"""`up` with fake binaries: whatever fails, `up` raises ClusterError with a clear message and
leaves no process behind (escher_harness.localcluster.cluster)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from escher_harness.localcluster import ClusterError, ClusterSpec, ports, up
from escher_harness.localcluster.clusterdir import ClusterDir, State
from escher_harness.localcluster.processes import spawn, stop

# An etcd that serves /health on the port of its --listen-client-urls, and nothing else.
FAKE_ETCD = f"""#!{sys.executable}
import http.server, sys
url = next(a for a in sys.argv if a.startswith("--listen-client-urls="))
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(url.rsplit(":", 1)[1])), Health).serve_forever()
"""
APISERVER_EXITS = f"#!{sys.executable}\nimport sys\nprint('boom: bad flag', file=sys.stderr)\n"
APISERVER_EXITS += "sys.exit(3)\n"
APISERVER_HANGS = f"#!{sys.executable}\nimport time\ntime.sleep(60)\n"


def fake_bin(directory: Path, apiserver: str) -> Path:
    directory.mkdir()
    for name, text in (
        ("etcd", FAKE_ETCD),
        ("kube-apiserver", apiserver),
        ("kube-scheduler", APISERVER_EXITS),
        ("kwok", APISERVER_EXITS),
    ):
        (directory / name).write_text(text)
        (directory / name).chmod(0o755)
    return directory


def processes_mentioning(text: str) -> list[str]:
    out = subprocess.run(["ps", "-eww", "-o", "pid,args"], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines()[1:] if text in line and "ps -eww" not in line]


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Path:
    return tmp_path / "cluster"


def test_component_exiting_fails_with_its_log_tail(
    tmp_path: Path, cluster_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ESCHER_BIN_DIR", str(fake_bin(tmp_path / "bin", APISERVER_EXITS)))
    with pytest.raises(ClusterError) as e:
        up(ClusterSpec(dir=cluster_dir, timeout=30))
    message = str(e.value)
    assert message.startswith("kube-apiserver exited during start-up with exit code 3")
    assert "boom: bad flag" in message
    assert processes_mentioning(str(cluster_dir)) == []
    assert [p.name for p in cluster_dir.iterdir()] == ["logs"]  # kept to debug the failure


def test_timeout_names_the_component_and_stops_everything(
    tmp_path: Path, cluster_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ESCHER_BIN_DIR", str(fake_bin(tmp_path / "bin", APISERVER_HANGS)))
    with pytest.raises(ClusterError) as e:
        up(ClusterSpec(dir=cluster_dir, timeout=1.5))
    assert str(e.value).startswith(
        "kube-apiserver was not ready at https://127.0.0.1:"
    ) and "within the start-up timeout of 1.5s" in str(e.value)
    assert processes_mentioning(str(cluster_dir)) == []


def test_interrupt_stops_everything(
    tmp_path: Path, cluster_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ESCHER_BIN_DIR", str(fake_bin(tmp_path / "bin", APISERVER_HANGS)))

    def interrupt(message: str) -> None:
        assert message.startswith("etcd ready")
        assert len(processes_mentioning(str(cluster_dir))) == 1  # etcd runs
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        up(ClusterSpec(dir=cluster_dir), progress=interrupt)
    assert processes_mentioning(str(cluster_dir)) == []


def test_refuses_a_directory_with_a_running_cluster(
    tmp_path: Path, cluster_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ESCHER_BIN_DIR", str(fake_bin(tmp_path / "bin", APISERVER_EXITS)))
    cdir = ClusterDir(cluster_dir)
    cluster_dir.mkdir()
    running = spawn(
        "etcd", ["/bin/sh", "-c", "sleep 60"], log=cdir.log("etcd"), port=1, health_url=""
    )
    try:
        cdir.write_state(State(created_dir=True, processes=(running,)))
        with pytest.raises(ClusterError, match=r"a cluster is already running .* down --dir"):
            up(ClusterSpec(dir=cluster_dir))
        assert cdir.read_state() == State(created_dir=True, processes=(running,))  # untouched
        # The ports the refused call chose are not left claimed for that directory.
        assert ports.claimed(cdir.state_file) == []
    finally:
        stop(running)


def test_invalid_scheduler_config_fails_before_anything_starts(
    tmp_path: Path, cluster_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ESCHER_BIN_DIR", str(fake_bin(tmp_path / "bin", APISERVER_EXITS)))
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Pod\n")
    with pytest.raises(ClusterError, match=r"scheduler config .*bad\.yaml: apiVersion is 'v1'"):
        up(ClusterSpec(dir=cluster_dir, scheduler_config=bad))
    assert not cluster_dir.exists()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "fancy"}, "mode 'fancy' is not one of none, extender, pure"),
        ({"nodes": -1}, "nodes must be >= 0"),
        ({"timeout": 0}, "timeout must be > 0"),
        ({"node_resources": {"gpu": "1"}}, "'gpu' is not an extended resource name"),
        ({"node_resources": {"kubernetes.io/x": "1"}}, "is not an extended resource name"),
        ({"node_resources": {"example.com/gpu": "0.5"}}, "extended resources are whole numbers"),
    ],
)
def test_spec_validation(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ClusterError) as e:
        ClusterSpec(dir=tmp_path, **kwargs)  # type: ignore[arg-type]
    assert message in str(e.value)


def test_terminated_cli_up_stops_everything(tmp_path: Path, cluster_dir: Path) -> None:
    env = {**os.environ, "ESCHER_BIN_DIR": str(fake_bin(tmp_path / "bin", APISERVER_HANGS))}
    command = [sys.executable, "-m", "extender", "cluster", "up", "--dir", str(cluster_dir)]
    with subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True) as cli:
        assert cli.stderr is not None
        assert cli.stderr.readline().startswith("etcd ready")
        cli.terminate()
        assert cli.wait(timeout=30) == 130
        assert "interrupted; everything started was stopped" in cli.stderr.read()
    assert processes_mentioning(str(cluster_dir)) == []
