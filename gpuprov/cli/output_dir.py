"""Write a set of files that belong together into one directory: all of them, or none.

``gpuprov kube render --out DIR`` writes several files that are read as a set (a ConfigMap, the
node labels that name its keys, Helm values); one failing half-way would leave old and new
mixed. So every target is checked before anything is written, with ``lstat`` and ``stat`` only:
no target is ever opened, so a FIFO in its place cannot block and a device is never written.
Then each file is written to a temporary file beside its target and, once every one is written,
renamed over it (atomic per file, mode 0644). A symbolic link to a regular file is followed (the
link stays, its target gets the new text); a dangling link, a directory, a FIFO, a socket or a
device where a file goes is refused, and so is an output directory that is not a directory.

>>> write_files("/dev/null", {"nodes.yaml": "x"})
Traceback (most recent call last):
gpuprov.core.errors.InputError: /dev/null: --out: a character device, not a directory
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Mapping

from gpuprov.core.errors import InputError, Problem

MODE = 0o644
KEY = "--out"
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISLNK, "a symbolic link"),
)


def write_files(directory: str, files: Mapping[str, str]) -> None:
    """Write ``files`` (name -> text) into ``directory``, making it if need be; InputError,
    with nothing written, when any of them cannot be."""
    problems = _directory_problems(directory)
    if problems:
        raise InputError(problems)
    targets: dict[str, str] = {}
    for name, text in files.items():
        path = os.path.join(directory, name)
        target, problem = _target(path)
        if problem is not None:
            problems.append(Problem(path, problem, key=KEY))
        else:
            targets[target] = text
    if problems:
        raise InputError(problems)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise InputError([Problem(directory, f"cannot be made: {e.strerror}", key=KEY)]) from None
    staged: list[tuple[str, str]] = []
    try:
        for target, text in targets.items():
            staged.append((_staged(target, text), target))
    except OSError as e:
        for temporary, _ in staged:
            os.unlink(temporary)
        where = e.filename or directory
        raise InputError([Problem(where, f"cannot be written: {e.strerror}", key=KEY)]) from None
    for temporary, target in staged:
        os.replace(temporary, target)


def _kind(mode: int) -> str:
    return next(name for test, name in _KINDS if test(mode))


def _directory_problems(directory: str) -> list[Problem]:
    """Why ``directory`` cannot hold the files, or []: it is a directory we may write, or it
    does not exist yet and its nearest existing parent is one."""
    path = os.path.abspath(directory)
    itself = True
    while True:
        try:
            status = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            # NotADirectoryError: a parent is a file, found further up.
            if os.path.islink(path):
                return [_problem(directory, f"{path} is a dangling symbolic link")]
            path, itself = os.path.dirname(path), False
            continue
        except OSError as e:
            return [_problem(directory, f"cannot be looked up: {e.strerror}")]
        break
    if not stat.S_ISDIR(status.st_mode):
        what = _kind(status.st_mode)
        if itself:
            return [_problem(directory, f"{what}, not a directory")]
        return [_problem(directory, f"{path} is {what}, so no directory can be made under it")]
    if not os.access(path, os.W_OK | os.X_OK):
        return [_problem(directory, f"{path} is not writable")]
    return []


def _problem(directory: str, message: str) -> Problem:
    return Problem(directory, message, key=KEY)


def _target(path: str) -> tuple[str, str | None]:
    """(the file to write for ``path``, None) or (path, why it must not be written)."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return path, None
    except OSError as e:
        return path, f"cannot be looked up: {e.strerror}"
    if stat.S_ISLNK(status.st_mode):
        try:
            status = os.stat(path)
        except FileNotFoundError:
            return path, f"a dangling symbolic link (to {os.readlink(path)})"
        except OSError as e:
            return path, f"a symbolic link that cannot be followed: {e.strerror}"
        path = os.path.realpath(path)
        if not os.access(os.path.dirname(path), os.W_OK | os.X_OK):
            return path, f"links to {path}, whose directory is not writable"
    if not stat.S_ISREG(status.st_mode):
        return path, f"{_kind(status.st_mode)} where the file goes: refused (not opened)"
    return path, None


def _staged(target: str, text: str) -> str:
    """``text`` in a new temporary file beside ``target`` (mode 0644, on disk); its path."""
    directory, name = os.path.split(target)
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, MODE)
    except OSError:
        os.unlink(temporary)
        raise
    return temporary
