"""Processes the lab starts: started in their own session, tracked by pid file, ended by pid.

A pid file holds ``<pid> <start time>`` (field 22 of /proc/PID/stat), so a pid that the kernel
has since handed to another process is never signalled.

>>> import subprocess, tempfile, pathlib
>>> pidfile = pathlib.Path(tempfile.mkdtemp()) / "sleep.pid"
>>> proc = start(["sleep", "30"], pidfile, log=pidfile.with_suffix(".log"))
>>> alive(pidfile)
True
>>> stop(pidfile, timeout=2.0)
>>> alive(pidfile)
False
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


def start(
    argv: list[str], pidfile: Path, log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """Start ``argv`` in a new session with output to ``log``; record it in ``pidfile``."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, env=env
        )
    record(proc.pid, pidfile)
    return proc


def record(pid: int, pidfile: Path) -> None:
    """Write ``pid`` and its start time to ``pidfile``."""
    pidfile.write_text(f"{pid} {_start_time(pid)}\n")


def read(pidfile: Path) -> int | None:
    """The pid in ``pidfile`` if that very process still runs (not a reused pid), else None."""
    try:
        fields = pidfile.read_text().split()
        pid = int(fields[0])
    except (OSError, ValueError, IndexError):
        return None
    started = _start_time(pid)
    if started is None or (len(fields) > 1 and fields[1] != str(started)):
        return None
    return pid


def alive(pidfile: Path) -> bool:
    """Whether the process recorded in ``pidfile`` runs (a zombie counts as ended)."""
    pid = read(pidfile)
    return pid is not None and _state(pid) not in (None, "Z")


def stop(pidfile: Path, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    """Send ``sig`` to the recorded process, wait up to ``timeout`` s, then SIGKILL it."""
    pid = read(pidfile)
    if pid is None:
        return
    _signal(pid, sig)
    if not wait_gone(pid, timeout):
        _signal(pid, signal.SIGKILL)
        wait_gone(pid, 5.0)


def wait_gone(pid: int, timeout: float) -> bool:
    """Wait until ``pid`` has ended (reaping it if it is our child); False on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass  # not our child: its parent (or init) reaps it
        if _state(pid) in (None, "Z"):
            return True
        time.sleep(0.05)
    return False


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    return text[text.rindex(")") + 2 :].split()


def _state(pid: int) -> str | None:
    stat = _stat(pid)
    return stat[0] if stat else None


def _start_time(pid: int) -> int | None:
    stat = _stat(pid)
    return int(stat[19]) if stat else None
