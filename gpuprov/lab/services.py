"""The lab's two services on the bridge address: the apt proxy and the repository's HTTP server.

- apt-cacher-ng on 10.200.0.1:13142 is the hosts' only way to Debian (they have no route out).
  Its cache outlives the lab in /var/tmp/gpuprov-lab-apt-cache, so warm runs download nothing.
- A Python HTTP server on 10.200.0.1:13180 serves the signed repositories (`/non-free/`,
  `/libnvidia-container/`), reached directly (the hosts' apt config says DIRECT for it).

>>> repo_url("non-free")
'http://10.200.0.1:13180/non-free/'
"""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

from gpuprov.lab import procs
from gpuprov.lab.errors import LabError
from gpuprov.lab.rundir import CACHE, RunDir
from gpuprov.lab.spec import GATEWAY

PROXY_PORT = 13142  # not 3142: a packaged apt-cacher-ng may already listen there
REPO_PORT = 13180
APT_CACHE = CACHE / "gpuprov-lab-apt-cache"


def repo_url(name: str) -> str:
    return f"http://{GATEWAY}:{REPO_PORT}/{name}/"


def start_proxy(run: RunDir) -> None:
    """Start apt-cacher-ng with its own minimal config (no Remap rules, which point elsewhere)."""
    run.proxy_dir.mkdir(parents=True, exist_ok=True)
    APT_CACHE.mkdir(parents=True, exist_ok=True)
    (run.proxy_dir / "acng.conf").write_text(
        "\n".join(
            [
                f"CacheDir: {APT_CACHE}",
                f"LogDir: {run.proxy_dir}",
                "SupportDir: /usr/lib/apt-cacher-ng",
                f"BindAddress: {GATEWAY}",
                f"Port: {PROXY_PORT}",
                "ForeGround: 1",
                f"PidFile: {run.proxy_dir}/pidfile",
                f"SocketPath: {run.proxy_dir}/socket",
                "ExThreshold: 4",
            ]
        )
        + "\n"
    )
    procs.start(
        ["/usr/sbin/apt-cacher-ng", "-c", str(run.proxy_dir)],
        run.proxy_pid,
        log=run.proxy_dir / "out.log",
    )
    _wait_listening(PROXY_PORT, run.proxy_pid, run.proxy_dir / "out.log")


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
    procs.stop(run.proxy_pid)
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
