"""The lab's services on the bridge address: the repositories' HTTP server and a stuck mirror.

- A Python HTTP server (threaded, static files) on 10.200.0.1:13180 serves the signed
  repositories (``/non-free/``, ``/libnvidia-container/``). It is the only thing lab hosts fetch
  packages from: every Debian package they need is in the base image (``base.sh``), so they
  have no Debian source, no proxy, and a deploy to 16 or 32 hosts at once downloads only the
  lab's own small packages. (An apt-cacher-ng in front of Debian used to hang when 16 hosts
  asked it for the same ``InRelease`` in the same second on a cold cache.)
- A stuck mirror on 10.200.0.1:13181 (``stuck_mirror.py``): it accepts connections and never
  answers, for tests of the deploy's time limits.

>>> repo_url("non-free")
'http://10.200.0.1:13180/non-free/'
>>> stuck_url("non-free")
'http://10.200.0.1:13181/non-free/'
"""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

from gpuprov_lab import procs
from gpuprov_lab.errors import LabError
from gpuprov_lab.rundir import RunDir
from gpuprov_lab.spec import GATEWAY

REPO_PORT = 13180
STUCK_PORT = 13181


def repo_url(name: str) -> str:
    return f"http://{GATEWAY}:{REPO_PORT}/{name}/"


def stuck_url(name: str) -> str:
    """A repository URL on the stuck mirror: connections open, nothing ever comes back."""
    return f"http://{GATEWAY}:{STUCK_PORT}/{name}/"


def start_stuck_mirror(run: RunDir) -> None:
    log = run.path / "stuck-mirror.log"
    procs.start(
        [sys.executable, "-m", "gpuprov_lab.stuck_mirror", GATEWAY, str(STUCK_PORT)],
        run.stuck_pid,
        log=log,
    )
    _wait_listening(STUCK_PORT, run.stuck_pid, log)


def start_repo_server(run: RunDir, www: Path) -> None:
    procs.start(
        [
            sys.executable,
            "-m",
            "http.server",
            str(REPO_PORT),
            "--bind",
            GATEWAY,
            "--directory",
            str(www),
        ],
        run.repo_pid,
        log=run.path / "repo-http.log",
    )
    _wait_listening(REPO_PORT, run.repo_pid, run.path / "repo-http.log")


def stop_all(run: RunDir) -> None:
    procs.stop(run.stuck_pid)
    procs.stop(run.repo_pid)


def _wait_listening(port: int, pidfile: Path, log: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not procs.alive(pidfile):
            break
        try:
            with socket.create_connection((GATEWAY, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    tail = log.read_text(errors="replace")[-500:] if log.exists() else ""
    raise LabError(f"nothing listens on {GATEWAY}:{port} ({log}): {tail.strip()}")
