"""The agent bundle's ``__main__.py``: run the agent from a bytecode-cached copy of the zip.

``zipimport`` never writes bytecode, so a zipapp compiles every module it imports on every run
(nvidia-ml-py's ``pynvml.py`` alone costs about 0.25 s of CPU). ``gpuprov/controller/bundle.py``
stores this file as the bundle's ``__main__.py``. It extracts the zip once into
``$GPUPROV_AGENT_CACHE/agent-<sha256 of the zip, 16 hex digits>/`` (default
``/var/cache/gpuprov``) and puts that directory first on ``sys.path``: the imports then come from
plain files, and Python keeps their bytecode in ``__pycache__`` as usual, one ``.pyc`` per
interpreter (named by its cache tag), so one copy serves every ``python3`` of the host.

The copy is made in a temporary directory beside it and renamed into place, so it is complete or
absent; when two runs race, the loser uses the winner's. A cache that cannot be written, or that
is not owned by root or the current user, or is writable by others, is not used: the agent then
runs from the zip as before. The cache never makes the agent fail. The first run of a new bundle
removes the copies of other bundles that no run has used for an hour.

Stdlib only, and nothing of gpuprov is imported before ``sys.path`` is set.
"""

import os
import stat
import sys

STALE_S = 3600  # another bundle's copy unused for this long is removed


def _contract(archive: str):
    """``gpuprov/host/contract.py`` loaded from the zip under its own name, leaving ``gpuprov`` itself
    unimported so that it later comes from the cached copy."""
    import importlib.util
    import zipimport

    spec = zipimport.zipimporter(os.path.join(archive, "gpuprov", "host")).find_spec("contract")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cached_copy(archive: str, base: str) -> str | None:
    """The directory holding ``archive``'s files under ``base`` (extracted if need be), or None."""
    import hashlib

    with open(archive, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    os.makedirs(base, mode=0o755, exist_ok=True)
    if not _trusted(os.stat(base)):
        return None
    target = os.path.join(base, f"agent-{digest}")
    if not os.path.lexists(target):
        _extract(archive, base, target)
    info = os.lstat(target)
    if not stat.S_ISDIR(info.st_mode) or not _trusted(info):
        return None
    try:
        os.utime(target)  # "in use": _remove_stale leaves it alone
    except OSError:
        pass
    return target


def _trusted(info: os.stat_result) -> bool:
    # Root runs what is in there: nobody else may have put it there.
    return info.st_uid in (0, os.geteuid()) and not info.st_mode & 0o022


def _extract(archive: str, base: str, target: str) -> None:
    import shutil
    import tempfile
    import zipfile

    tmp = tempfile.mkdtemp(prefix=".agent-", dir=base)
    try:
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tmp)
        for root, dirs, files in os.walk(tmp):
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o755)
            for name in files:
                os.chmod(os.path.join(root, name), 0o644)
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, target)
        except OSError:
            if not os.path.isdir(target):
                raise
            return  # another run made it first: use theirs
        _remove_stale(base, keep=target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # left only when the rename did not happen


def _remove_stale(base: str, keep: str) -> None:
    import shutil
    import time

    cutoff = time.time() - STALE_S
    for entry in os.scandir(base):
        name = entry.name
        copy = name.startswith("agent-") and len(name) == 22
        if entry.path == keep or not (copy or name.startswith(".agent-")):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            if not stat.S_ISDIR(info.st_mode) or info.st_mtime >= cutoff:
                continue
            # Renamed away first: a run starting now finds it absent, not half removed.
            doomed = os.path.join(base, f".agent-removing-{os.getpid()}-{name}")
            os.rename(entry.path, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
        except OSError:
            pass


if __name__ == "__main__":
    archive = getattr(__spec__.loader, "archive", None) if __spec__ else None  # the zip
    if archive:
        try:
            contract = _contract(archive)
            base = os.environ.get(contract.AGENT_CACHE_ENV) or contract.AGENT_CACHE_DIR
            copy = cached_copy(archive, base)
        except Exception:  # the cache only saves time; the zip always works
            copy = None
        if copy:
            sys.path.insert(0, copy)

    from gpuprov.host.agent.main import main

    sys.exit(main())
