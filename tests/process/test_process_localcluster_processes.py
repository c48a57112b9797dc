"""Process handling and clean-up of the local control plane: spawn/stop robust to dead and
reused pids (escher_harness.localcluster.processes), and down/status on half-started, stale or
foreign directories (escher_harness.localcluster.cluster)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from escher_harness.localcluster import ClusterError, down, processes, status
from escher_harness.localcluster.clusterdir import ClusterDir, State
from escher_harness.localcluster.processes import (
    ProcessRecord,
    exit_code,
    is_running,
    log_tail,
    rss_bytes,
    spawn,
    stop,
)


def live_group_members(pgid: int) -> list[str]:
    """Non-zombie processes in a process group, from ps (independent of the code under test)."""
    out = subprocess.run(["ps", "-e", "-o", "pgid=,stat=,pid="], capture_output=True, text=True)
    return [
        line
        for line in out.stdout.splitlines()
        if int(line.split()[0]) == pgid and not line.split()[1].startswith("Z")
    ]


def start(tmp_path: Path, script: str, name: str = "fake") -> ProcessRecord:
    return spawn(
        name,
        ["/bin/sh", "-c", script, f"marker={tmp_path}"],
        log=tmp_path / "logs" / f"{name}.log",
        port=1,
        health_url="http://127.0.0.1:1/health",
    )


PRINT_MASK_AND_WAIT = """
import time
print(next(l for l in open('/proc/self/status') if l.startswith('SigBlk')), flush=True)
time.sleep(60)
"""


def wait_exit(record: ProcessRecord) -> None:
    deadline = time.monotonic() + 10
    while is_running(record):
        assert time.monotonic() < deadline
        time.sleep(0.01)


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[ProcessRecord]]:
    """Records of processes a test started; whatever is still running is stopped after it."""
    records: list[ProcessRecord] = []
    yield records
    for record in records:
        stop(record, grace=0.5)


def test_stop_kills_the_whole_group(tmp_path: Path, started: list[ProcessRecord]) -> None:
    record = start(tmp_path, "sleep 60 & sleep 60")
    started.append(record)
    assert is_running(record)
    deadline = time.monotonic() + 5
    while len(live_group_members(record.pid)) < 3:  # sh and both sleeps
        assert time.monotonic() < deadline
        time.sleep(0.01)
    stop(record)
    assert not is_running(record)
    assert live_group_members(record.pid) == []
    assert not Path(f"/proc/{record.pid}").exists()  # reaped, not left a zombie


def test_a_child_spawned_while_interrupts_are_deferred_still_stops_on_sigterm(
    tmp_path: Path, started: list[ProcessRecord]
) -> None:
    # cluster.up blocks SIGINT and SIGTERM while it spawns and records each component; a
    # child that inherited that mask ignored the SIGTERM of `down` and was killed only after
    # the 10 s grace (every e2e teardown paid it for the extender).
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        record = spawn(  # Python, as the extender: /bin/sh would reset the mask itself
            "fake",
            [sys.executable, "-c", PRINT_MASK_AND_WAIT],
            log=tmp_path / "fake.log",
            port=1,
            health_url="http://127.0.0.1:1/health",
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    started.append(record)
    deadline = time.monotonic() + 5
    while "SigBlk" not in record.log.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert int(record.log.read_text().split()[1], 16) == 0, record.log.read_text()
    began = time.monotonic()
    stop(record, grace=5.0)
    assert not is_running(record)
    assert time.monotonic() - began < 2.5  # SIGTERM ended it; the grace was not waited out


def test_stop_escalates_to_sigkill(tmp_path: Path, started: list[ProcessRecord]) -> None:
    record = start(tmp_path, "trap '' TERM; echo ready; sleep 60")
    started.append(record)
    while "ready" not in log_tail(record.log):
        time.sleep(0.01)
    began = time.monotonic()
    stop(record, grace=0.3)
    assert time.monotonic() - began >= 0.3
    assert live_group_members(record.pid) == []


LEADER_EXITS_ALONE = """
import ctypes, signal, threading, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
threading.Thread(target=time.sleep, args=(60,)).start()
print("ready", flush=True)
ctypes.CDLL(None).pthread_exit(None)
"""


def test_stop_waits_for_a_zombie_leader_to_be_reaped(
    tmp_path: Path, started: list[ProcessRecord]
) -> None:
    # A process whose leader thread has exited shows as a zombie while its other threads run
    # (a Go binary's do for a moment after SIGTERM): the group looked empty at once, and
    # stop() returned with the process running, or left unreaped (benchmarks gathered them).
    record = spawn(
        "fake",
        [sys.executable, "-c", LEADER_EXITS_ALONE],
        log=tmp_path / "fake.log",
        port=1,
        health_url="http://127.0.0.1:1/health",
    )
    started.append(record)
    stat = Path(f"/proc/{record.pid}/stat")
    deadline = time.monotonic() + 5
    while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":  # the leader thread has exited
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert len(list(Path(f"/proc/{record.pid}/task").iterdir())) == 2  # its other thread runs
    assert not is_running(record)
    stop(record, grace=0.3)  # SIGTERM is ignored: SIGKILL ends it
    assert not Path(f"/proc/{record.pid}").exists()


def test_stop_leaves_a_reused_pid_alone(tmp_path: Path, started: list[ProcessRecord]) -> None:
    record = start(tmp_path, "sleep 60")
    started.append(record)
    reused = replace(record, start_time=record.start_time + 1)  # as if the pid was reused
    assert not is_running(reused)
    stop(reused)
    assert is_running(record)


def test_dead_process(tmp_path: Path) -> None:
    record = start(tmp_path, "echo bye; exit 3")
    wait_exit(record)
    assert exit_code(record) == 3
    assert rss_bytes(record) == 0
    stop(record)  # nothing to do, no error
    assert log_tail(record.log) == "bye"


def test_killed_process_reports_the_signal(tmp_path: Path) -> None:
    record = start(tmp_path, "kill -9 $$")
    wait_exit(record)
    assert exit_code(record) == -9


def test_rss_of_a_running_process(tmp_path: Path, started: list[ProcessRecord]) -> None:
    record = start(tmp_path, "sleep 60")
    started.append(record)
    # Just forked, the child may not have made its own group yet (setsid, then exec): its
    # group has no member for that instant (a clean-clone run read 0 once).
    deadline = time.monotonic() + 5
    while not live_group_members(record.pid):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert rss_bytes(record) > 0


def test_a_process_started_on_cpus_runs_there_and_its_record_says_so(
    tmp_path: Path, started: list[ProcessRecord]
) -> None:
    before = os.sched_getaffinity(0)
    one = frozenset({max(before)})
    record = spawn(
        "fake", ["/bin/sleep", "60"], log=tmp_path / "l.log", port=1, health_url="", cpus=one
    )
    started.append(record)
    assert os.sched_getaffinity(record.pid) == one
    assert record.cpus == (max(before),)
    assert ProcessRecord.from_json(json.loads(json.dumps(record.to_json()))) == record
    assert os.sched_getaffinity(0) == before  # the starting thread's own, given back
    anywhere = start(tmp_path, "sleep 60", name="anywhere")
    started.append(anywhere)
    assert os.sched_getaffinity(anywhere.pid) == before and anywhere.cpus == ()


def autogroup(pid: int) -> str:
    """A process's autogroup line, from /proc (independent of the code under test)."""
    return Path(f"/proc/{pid}/autogroup").read_text().strip()


def test_a_process_given_a_share_has_its_sessions_autogroup_at_that_nice(
    tmp_path: Path, started: list[ProcessRecord]
) -> None:
    """Positive, so that it needs no privilege; its own session, so nobody else's share."""
    record = spawn(
        "fake", ["/bin/sleep", "60"], log=tmp_path / "l.log", port=1, health_url="", nice=7
    )
    started.append(record)
    assert autogroup(record.pid).endswith(" nice 7") and record.nice == 7
    assert autogroup(record.pid) != autogroup(os.getpid())
    assert ProcessRecord.from_json(json.loads(json.dumps(record.to_json()))) == record
    plain = start(tmp_path, "sleep 60", name="plain")
    started.append(plain)
    assert autogroup(plain.pid).endswith(" nice 0") and plain.nice == 0


@pytest.mark.parametrize(
    ("nice", "enabled", "reason"),
    [
        (20, "1", "a nice is in -20..19, not 20"),
        (-21, "1", "a nice is in -20..19, not -21"),
        (5, "0", "an autogroup nice needs Linux's autogroups"),
    ],
)
def test_a_share_that_cannot_be_given_fails_the_start_and_leaves_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nice: int, enabled: str, reason: str
) -> None:
    switch = tmp_path / "sched_autogroup_enabled"
    switch.write_text(enabled)
    monkeypatch.setattr(processes, "_AUTOGROUPS", switch)
    marker = f"marker={tmp_path}"
    with pytest.raises(ClusterError, match=f"cannot start fake: {reason}"):
        spawn(
            "fake",
            ["/bin/sh", "-c", "sleep 60", marker],
            log=tmp_path / "l.log",
            port=1,
            health_url="",
            nice=nice,
        )
    ps = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout
    assert marker not in ps


def test_spawn_failure_is_a_cluster_error(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="cannot start fake"):
        spawn("fake", [str(tmp_path / "nope")], log=tmp_path / "l.log", port=1, health_url="")


def test_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert log_tail(log, lines=3) == "line 97\nline 98\nline 99"
    assert log_tail(tmp_path / "missing.log") == f"(no log at {tmp_path / 'missing.log'})"


def test_record_json_round_trip(tmp_path: Path, started: list[ProcessRecord]) -> None:
    record = replace(start(tmp_path, "sleep 60"), health_token="t")
    started.append(record)
    assert ProcessRecord.from_json(json.loads(json.dumps(record.to_json()))) == record


def write_files(cdir: ClusterDir) -> None:
    cdir.logs.mkdir(parents=True, exist_ok=True)
    cdir.etcd_data.mkdir(exist_ok=True)
    for path in (cdir.kubeconfig, cdir.tokens, cdir.log("etcd")):
        path.write_text("x")


def test_down_stops_a_half_started_cluster(tmp_path: Path, started: list[ProcessRecord]) -> None:
    cdir = ClusterDir(tmp_path / "c")
    write_files(cdir)
    alive = start(cdir.root, "sleep 60", name="etcd")
    started.append(alive)
    cdir.write_state(State(created_dir=True, processes=(alive,)))
    down(cdir.root)
    assert not is_running(alive)
    assert not cdir.root.exists()
    down(cdir.root)  # idempotent


@pytest.mark.parametrize(
    ("name", "terminated"), [("etcd", True), ("extender", True), ("kube-apiserver", False)]
)
def test_down_kills_only_the_api_server_without_a_sigterm(
    tmp_path: Path, started: list[ProcessRecord], name: str, terminated: bool
) -> None:
    cdir = ClusterDir(tmp_path / "c")
    write_files(cdir)
    mark, armed = tmp_path / "terminated", tmp_path / "armed"
    script = f"trap 'touch {mark}; exit 0' TERM; touch {armed}; while :; do sleep 0.05; done"
    record = start(tmp_path, script, name)
    started.append(record)
    deadline = time.monotonic() + 10
    while not armed.exists():  # a SIGTERM before the trap is set would look like a SIGKILL
        assert time.monotonic() < deadline
        time.sleep(0.01)
    cdir.write_state(State(created_dir=True, processes=(record,)))
    down(cdir.root)
    assert not is_running(record)
    assert mark.exists() == terminated


def test_down_with_dead_and_reused_pids(tmp_path: Path, started: list[ProcessRecord]) -> None:
    cdir = ClusterDir(tmp_path / "c")
    write_files(cdir)
    dead = start(tmp_path, "exit 0", name="etcd")
    wait_exit(dead)
    unrelated = start(tmp_path, "sleep 60", name="other")
    started.append(unrelated)
    reused = replace(unrelated, name="kube-apiserver", start_time=unrelated.start_time - 1)
    cdir.write_state(State(created_dir=False, processes=(dead, reused)))
    down(cdir.root)
    assert is_running(unrelated)  # its pid was recorded with another start time
    assert cdir.root.is_dir() and list(cdir.root.iterdir()) == []  # pre-existing: kept, emptied


def test_down_keep_logs(tmp_path: Path) -> None:
    cdir = ClusterDir(tmp_path / "c")
    write_files(cdir)
    cdir.write_state(State(created_dir=True))
    down(cdir.root, keep_logs=True)
    assert [p.name for p in cdir.root.iterdir()] == ["logs"]


def test_down_never_touches_a_directory_up_did_not_use(tmp_path: Path) -> None:
    (tmp_path / "kubeconfig").write_text("the user's own")
    (tmp_path / "logs").mkdir()
    down(tmp_path)
    down(tmp_path / "does-not-exist")
    assert (tmp_path / "kubeconfig").read_text() == "the user's own"
    assert (tmp_path / "logs").is_dir()


def test_down_on_a_corrupt_state_file(tmp_path: Path) -> None:
    ClusterDir(tmp_path).state_file.write_text("{not json")
    with pytest.raises(ClusterError, match=r"cannot read .*processes\.json"):
        down(tmp_path)


def test_status(tmp_path: Path, started: list[ProcessRecord]) -> None:
    cdir = ClusterDir(tmp_path)
    alive = start(tmp_path, "sleep 60", name="etcd")
    started.append(alive)
    dead = start(tmp_path, "exit 0", name="kube-apiserver")
    wait_exit(dead)
    cdir.write_state(State(created_dir=False, processes=(alive, dead)))
    st = status(tmp_path)
    assert not st.ready and not st.healthy
    etcd, apiserver = st.components
    assert etcd.alive and not etcd.healthy and etcd.rss_bytes > 0
    assert etcd.detail is not None and "Connect" in etcd.detail  # nothing listens on port 1
    assert not apiserver.alive and apiserver.detail == "not running" and apiserver.rss_bytes == 0
    assert st.total_rss_bytes == etcd.rss_bytes
    assert st.to_json()["components"][0]["name"] == "etcd"


def test_status_without_a_cluster(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="no cluster in"):
        status(tmp_path)
