"""Start, watch and stop the control plane's processes, robust to pid reuse.

Called by cluster.up (spawn, is_running, exit_code), cluster.down (stop) and cluster.status
(is_running, rss_bytes). Each process runs in its own session, so its whole process group can
be signalled and its CPU share set apart from the others' (set_autogroup_nice); a
ProcessRecord carries the pid and its start time (from /proc/<pid>/stat), so a pid reused by
an unrelated process is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from escher_harness.localcluster.cpus import starting_on
from escher_harness.localcluster.errors import ClusterError

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcessRecord:
    """One started component, as stored in the cluster directory's state file."""

    name: str
    pid: int
    start_time: int  # clock ticks after boot, field 22 of /proc/<pid>/stat
    argv: tuple[str, ...]
    log: Path
    port: int
    health_url: str
    health_token: str | None = None
    # Variables set on top of the cluster's environment (e.g. an extender replica's lease
    # durations), so a restart starts it the same way.
    env: Mapping[str, str] = field(default_factory=dict)
    # The CPUs it was started on (ClusterSpec.cpu_split), empty: any; a restart keeps them.
    cpus: tuple[int, ...] = ()
    # Its session's autogroup nice (ClusterSpec.extender_nice), 0: as every other; a restart
    # keeps it.
    nice: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pid": self.pid,
            "start_time": self.start_time,
            "argv": list(self.argv),
            "log": str(self.log),
            "port": self.port,
            "health_url": self.health_url,
            "health_token": self.health_token,
            "env": dict(self.env),
            "cpus": list(self.cpus),
            "nice": self.nice,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProcessRecord:
        return cls(
            name=data["name"],
            pid=int(data["pid"]),
            start_time=int(data["start_time"]),
            argv=tuple(data["argv"]),
            log=Path(data["log"]),
            port=int(data["port"]),
            health_url=data["health_url"],
            health_token=data.get("health_token"),
            env=dict(data.get("env") or {}),
            cpus=tuple(int(c) for c in data.get("cpus") or ()),
            nice=int(data.get("nice") or 0),
        )


class _Stat(NamedTuple):
    state: str
    pgid: int
    start_time: int
    rss_pages: int
    cpu_ticks: int  # utime + stime, all threads


def spawn(
    name: str,
    argv: Sequence[str],
    *,
    log: Path,
    port: int,
    health_url: str,
    health_token: str | None = None,
    env: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    cpus: frozenset[int] | None = None,
    nice: int = 0,
) -> ProcessRecord:
    """Start argv in a new session, stdin from /dev/null, stdout and stderr to `log`, with
    `env` (default: this process's) and `extra_env` on top, which the record keeps, on
    `cpus` (default: this thread's), its session's autogroup at `nice`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    # posix_spawn rather than subprocess.Popen: no Popen object whose finaliser would warn
    # about a child that is meant to outlive it (the CLI's `up` returns with the cluster running).
    try:
        with starting_on(cpus):
            pid = _spawn(argv, {**(os.environ if env is None else env), **(extra_env or {})}, log)
    except OSError as e:
        raise ClusterError(f"cannot start {name} ({argv[0]}): {e.strerror}") from None
    if nice:
        try:
            set_autogroup_nice(pid, nice)
        except ClusterError as e:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise ClusterError(f"cannot start {name}: {e}") from None
    stat = _read_stat(pid)
    return ProcessRecord(
        name=name,
        pid=pid,
        # The child exists until it is reaped, so its stat is readable; 0 only if it vanished.
        start_time=stat.start_time if stat else 0,
        argv=tuple(argv),
        log=log,
        port=port,
        health_url=health_url,
        health_token=health_token,
        env=dict(extra_env or {}),
        cpus=tuple(sorted(cpus or ())),
        nice=nice,
    )


_AUTOGROUPS = Path("/proc/sys/kernel/sched_autogroup_enabled")
_CAP_SYS_NICE = 23


def autogroup_nice_refused(nice: int) -> str | None:
    """Why this process could not give a session `nice` (None: it can)."""
    if not -20 <= nice <= 19:
        return f"a nice is in -20..19, not {nice}"
    try:
        enabled = _AUTOGROUPS.read_text().strip() == "1"
    except OSError:
        enabled = False
    if not enabled:
        return (
            f"an autogroup nice needs Linux's autogroups ({_AUTOGROUPS} is not 1): "
            "without them, sessions do not get CPU shares of their own"
        )
    if nice < 0:
        status = Path("/proc/self/status").read_text()
        caps = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("CapEff:")), "0")
        if not int(caps, 16) >> _CAP_SYS_NICE & 1:
            return f"an autogroup nice below 0 ({nice}) needs CAP_SYS_NICE"
    return None


def set_autogroup_nice(pid: int, nice: int) -> None:
    """Give the session of `pid` (one it leads: spawn's) the CPU share of `nice`.

    Linux shares a saturated CPU between sessions (autogroups), each weighted by its
    autogroup's nice, whatever the nice of its processes; so this, not setpriority, is what
    sets a component's share against the others, as a pod's CPU request sets its cgroup's
    weight."""
    refused = autogroup_nice_refused(nice)
    if refused:
        raise ClusterError(refused)
    try:
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))
    except OSError as e:
        raise ClusterError(f"cannot set the autogroup nice to {nice}: {e.strerror}") from None


def _spawn(argv: Sequence[str], env: Mapping[str, str], log: Path) -> int:
    return os.posix_spawn(
        argv[0],
        list(argv),
        env,
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, str(log), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
            (os.POSIX_SPAWN_DUP2, 1, 2),
        ],
        setsid=True,
        # The caller may be deferring its own interrupts (cluster.up blocks SIGINT and
        # SIGTERM while it spawns and records a process): the child must not inherit that
        # mask, or it would ignore the SIGTERM that stops it and be killed after the grace.
        setsigmask=(),
    )


def is_running(record: ProcessRecord) -> bool:
    """True while the recorded process (not a zombie, not a reused pid) runs."""
    stat = _read_stat(record.pid)
    return stat is not None and stat.start_time == record.start_time and stat.state != "Z"


def exit_code(record: ProcessRecord) -> int | None:
    """Reap an exited child of this process and return its exit code (-N for signal N);
    None when it still runs or is not our child (e.g. `down` run by another process)."""
    try:
        pid, status = os.waitpid(record.pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status) if pid else None


def wait_exit(record: ProcessRecord, timeout: float = 10.0) -> int | None:
    """The exit code of a child that is_running() says has ended, reaping it; None if it was
    not reaped within `timeout` s. A multi-threaded child (any Go binary) shows as a zombie
    while its other threads are still exiting, and waitpid does not report it until they
    have: exit_code() straight after is_running() can see None."""
    deadline = time.monotonic() + timeout
    while (code := exit_code(record)) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return code


def stop(
    record: ProcessRecord, *, grace: float = 10.0, first: signal.Signals = signal.SIGTERM
) -> None:
    """Signal the record's process group with `first` (SIGTERM), wait up to `grace` s, then
    SIGKILL what is left.

    A group whose leader pid now belongs to another process is left alone. When the leader is
    gone, processes still in its group are ours: Linux does not reuse a pid that is still some
    group's id. A child of ours counts as stopped once it is reaped: its leader shows as a
    zombie while its other threads still run or exit (a Go binary's, or a leader thread that
    exited alone), and a group that looks empty then was left running or unreaped.
    """
    if not _owns_group(record):
        return
    for sig, wait in ((first, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(record.pid, sig)
        deadline = time.monotonic() + wait
        while True:
            if _reaped(record.pid) and not _group_members(record.pid):
                return
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
    raise ClusterError(f"{record.name} (process group {record.pid}) survived SIGKILL")


def rss_bytes(record: ProcessRecord) -> int:
    """Resident memory of the record's process group (0 when it is not running)."""
    if not is_running(record):
        return 0
    return sum(member.rss_pages for member in _group_members(record.pid)) * _PAGE_SIZE


def cpu_seconds(record: ProcessRecord) -> float:
    """User plus system CPU time the record's process group has used (all threads; children
    it has reaped included; 0 when it is not running). Benchmarks take differences."""
    if not is_running(record):
        return 0.0
    return sum(member.cpu_ticks for member in _group_members(record.pid)) / _CLOCK_TICKS


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def _reaped(pid: int) -> bool:
    """Reap `pid` if it is an exited child of ours, so it leaves /proc (no zombie stays).
    False while it is a child of ours that still runs or whose threads are still exiting;
    True once reaped, or when it is not our child (another process started it)."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] != 0
    except ChildProcessError:
        return True


def _owns_group(record: ProcessRecord) -> bool:
    stat = _read_stat(record.pid)
    return stat is None or stat.start_time == record.start_time


def _group_members(pgid: int) -> list[_Stat]:
    """Live (non-zombie) processes in process group pgid."""
    members = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = _read_stat(int(entry.name))
            if stat is not None and stat.pgid == pgid and stat.state != "Z":
                members.append(stat)
    return members


def _read_stat(pid: int) -> _Stat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    return _Stat(
        state=fields[0],
        pgid=int(fields[2]),
        start_time=int(fields[19]),
        rss_pages=int(fields[21]),
        # utime, stime, cutime, cstime (fields 14-17)
        cpu_ticks=sum(int(f) for f in fields[11:15]),
    )
