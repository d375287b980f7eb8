"""Build one Go command of a module at a release tag from the Go module proxy, once, into a cache
outside any work tree; and read files of that module's source at the same tag.

``go install MODULE/CMD@VERSION`` builds with the module's own ``go.mod`` and ``go.sum`` as the
main module (checked against the checksum database), the way its release is built, without a
wrapper module of ours that could resolve other versions of its dependencies. The binary is
written under a temporary name and renamed, so a cache never holds half a binary; a binary
that is there is never rebuilt. Builds on one machine queue on one lock (``build_lock``): two Go
builds sharing a wrapper module broke each other (``go: updating go.mod: existing contents have
changed since last read``), and on 2 cores two builds at once are no faster than one after the
other.

>>> install_args("sigs.k8s.io/kwok", "v0.8.0", "cmd/kwok", "-X a.b=c")
['install', '-trimpath', '-ldflags', '-s -w -X a.b=c', 'sigs.k8s.io/kwok/cmd/kwok@v0.8.0']
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuprov_lab.errors import LabError

LOCK = Path("/var/tmp/.gpuprov-go-build.lock")


@contextlib.contextmanager
def build_lock():
    """Hold the machine's Go build lock; callers check for their binary again once inside."""
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def install_args(module: str, version: str, command: str, ldflags: str = "") -> list[str]:
    """The ``go`` arguments that build ``module/command`` at ``version``: stripped symbols and
    paths (``-s -w -trimpath``: a smaller binary, a build that does not depend on where the
    module cache is) and the release's own version variables in ``ldflags``."""
    flags = f"-s -w {ldflags}".strip()
    return ["install", "-trimpath", "-ldflags", flags, f"{module}/{command}@{version}"]


def build(
    module: str,
    version: str,
    command: str,
    target: Path,
    ldflags: str = "",
    log=sys.stderr,
) -> Path:
    """``target``, built first when missing. Raises LabError with Go's own last lines."""
    if target.is_file():
        return target
    with build_lock():
        if target.is_file():  # built by the run that held the lock before us
            return target
        return _install(module, version, command, target, ldflags, log)


def _install(module: str, version: str, command: str, target: Path, ldflags: str, log) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"building {module}/{command}@{version} into {target}", file=log)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".gobin-") as gobin:
        _go(install_args(module, version, command, ldflags), GOBIN=gobin)
        built = Path(gobin) / Path(command).name
        built.chmod(0o755)
        built.replace(target)  # same file system: whole or not at all
    print(f"built {target.name} in {time.monotonic() - started:.0f} s", file=log)
    return target


def source(module: str, version: str) -> Path:
    """The module's source at ``version`` in the Go module cache (read-only), downloaded from
    the proxy first when missing."""
    out = _go(["mod", "download", "-json", f"{module}@{version}"])
    info = json.loads(out)
    if info.get("Error"):
        raise LabError(f"go mod download {module}@{version}: {info['Error']}")
    return Path(info["Dir"])


def copy_tree(source_dir: Path, target: Path) -> None:
    """Copy ``source_dir`` to ``target`` whole (a temporary copy renamed into place), writable:
    files in the module cache are read-only."""
    if target.exists():
        return
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(source_dir, partial, copy_function=shutil.copyfile)
    for directory in (partial, *(p for p in partial.rglob("*") if p.is_dir())):
        directory.chmod(0o755)  # copytree copies the cache's r-x modes
    try:
        partial.replace(target)
    except OSError:
        if not target.is_dir():
            raise
        shutil.rmtree(partial)  # another build copied the same files first


def _go(args: list[str], **env: str) -> str:
    environment = {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "", **env}
    try:
        result = subprocess.run(
            ["go", *args],
            env=environment,
            capture_output=True,
            text=True,
            cwd=tempfile.gettempdir(),
        )
    except OSError as e:
        raise LabError(f"cannot run go: {e}") from None
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-15:]
        raise LabError(f"`go {' '.join(args)}` failed:\n" + "\n".join(tail))
    return result.stdout
