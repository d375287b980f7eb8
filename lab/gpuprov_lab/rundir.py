"""Where a running lab keeps its state, and the lock that stops two lab commands racing.

The run directory (``/tmp/gpuprov-lab``, or ``$GPUPROV_LAB_DIR``) holds ``lab.json`` (the hosts,
for `status` and ``inventories/lab.py``), the SSH key and config, pid files and the hosts' overlay
directories. Caches that outlive a lab live under ``/var/tmp``.

>>> run = RunDir(Path("/tmp/gpuprov-lab"))
>>> str(run.ssh_config), str(run.host("lab-a100-01").root)
('/tmp/gpuprov-lab/ssh_config', '/tmp/gpuprov-lab/hosts/lab-a100-01/root')
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuprov.core.errors import InputError, Problem
from gpuprov_lab.spec import slot

SCHEMA = "gpuprov.lab/v1"
CACHE = Path("/var/tmp")
_SUFFIX = "" if slot() == 0 else f"-{slot()}"  # slot N: /tmp/gpuprov-lab-N, its own lock
LOCK = Path(f"/run/lock/gpuprov-lab{_SUFFIX}.lock")


def default_dir() -> Path:
    return Path(os.environ.get("GPUPROV_LAB_DIR", f"/tmp/gpuprov-lab{_SUFFIX}"))


@dataclass(frozen=True)
class HostDir:
    """One host's directory: overlay upper/work/root, launcher and nspawn pid files, console."""

    path: Path

    @property
    def upper(self) -> Path:
        return self.path / "upper"

    @property
    def work(self) -> Path:
        return self.path / "work"

    @property
    def root(self) -> Path:
        return self.path / "root"

    @property
    def launcher_pid(self) -> Path:
        return self.path / "launcher.pid"

    @property
    def nspawn_pid(self) -> Path:
        return self.path / "nspawn.pid"

    @property
    def console(self) -> Path:
        return self.path / "console.log"


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def state(self) -> Path:
        return self.path / "lab.json"

    @property
    def key(self) -> Path:
        return self.path / "id_ed25519"

    @property
    def ssh_config(self) -> Path:
        return self.path / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        """Every lab host's key, under its name and address (lab/gpuprov_lab/ssh.py)."""
        return self.path / "known_hosts"

    @property
    def host_keys(self) -> Path:
        """``<address>/ssh_host_ed25519_key``: the key of the host at each address."""
        return self.path / "host-keys"

    @property
    def repo_key(self) -> Path:
        """The lab repository's public signing key (armored), for inventories and tests."""
        return self.path / "repo-key.asc"

    @property
    def stuck_pid(self) -> Path:
        return self.path / "stuck-mirror.pid"

    @property
    def repo_pid(self) -> Path:
        return self.path / "repo-http.pid"

    @property
    def kube(self) -> Path:
        """The control plane's directory: certificates, etcd's data, pid files and logs."""
        return self.path / "kube"

    @property
    def admin_kubeconfig(self) -> Path:
        """The lab cluster's admin kubeconfig (``ControlPlane.admin_kubeconfig``)."""
        return self.kube / "admin.kubeconfig"

    def node_kubeconfig(self, name: str) -> Path:
        """Where the controller keeps host ``name``'s kubelet kubeconfig (embedded in the host)."""
        return self.kube / f"node-{name}.kubeconfig"

    def host(self, name: str) -> HostDir:
        return HostDir(self.path / "hosts" / name)

    def host_dirs(self) -> list[HostDir]:
        hosts = self.path / "hosts"
        return [HostDir(p) for p in sorted(hosts.iterdir())] if hosts.is_dir() else []

    def pidfiles(self) -> list[Path]:
        """Every pid file of this run: services, the control plane and each host's launcher and
        nspawn."""
        files = [self.stuck_pid, self.repo_pid]
        files += [self.kube / f"{c}.pid" for c in ("etcd", "apiserver", "scheduler")]
        files.append(self.kube / "controller-manager.pid")
        for host in self.host_dirs():
            files += [host.launcher_pid, host.nspawn_pid]
        return [f for f in files if f.exists()]

    def read_state(self) -> dict[str, Any] | None:
        try:
            document = json.loads(self.state.read_text())
        except (OSError, ValueError):
            return None
        return document if document.get("schema") == SCHEMA else None

    def write_state(self, document: dict[str, Any]) -> None:
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text(json.dumps({"schema": SCHEMA, **document}, indent=2) + "\n")
        tmp.replace(self.state)


def prune_cache(prefix: str, keep: Path) -> None:
    """Delete the cached builds named ``<prefix>*`` other than ``keep`` (and their logs), except
    one that a running lab uses.

    Called right after a new build. Another build may still be in use then, by a lab of
    another slot or checkout: a base is the lower directory of every host overlay of a running
    lab (a mount), and a repository is the directory its HTTP server serves (a process's
    argument), so deleting either pulls the files from under that lab.
    """
    in_use = Path("/proc/mounts").read_text() + "\n" + _process_arguments()
    for path in CACHE.glob(prefix + "*"):
        if re.search(re.escape(str(path)) + r"([,:/\s\0]|$)", in_use, re.MULTILINE):
            continue
        if path.suffix == ".lock":  # another build may hold it (base.ensure)
            continue
        if path != keep and path.name != keep.name + ".log":
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def _process_arguments() -> str:
    """Every process's command line, one per line (arguments NUL-separated)."""
    lines = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                lines.append((proc / "cmdline").read_bytes().decode(errors="replace"))
            except OSError:  # ended meanwhile
                continue
    return "\n".join(lines)


@contextmanager
def locked(what: str) -> Iterator[None]:
    """Hold the machine-wide lab lock for ``what``; refuse at once if another command holds it."""
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            raise InputError(
                [
                    Problem(
                        "gpuprov lab",
                        f"cannot {what}: {holder} is using the lab "
                        "right now; wait for it to finish",
                    )
                ]
            ) from None
        f.seek(0)
        f.truncate()
        f.write(f"`gpuprov lab {what}` (pid {os.getpid()})")
        f.flush()
        try:
            yield
        finally:
            f.truncate(0)
