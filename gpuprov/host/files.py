"""Bounded reads of the files the host side looks at: never blocking, never more than a limit.

The probe reports each file it was asked for as its text, ``None`` when it does not exist, and
``{"error": why}`` when it does not read it: larger than the limit, not a regular file
(``/dev/zero``, a FIFO, a directory) or unreadable. The MIG layout and the kubelet's checkpoint
are read the same way.
"""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Sequence
from typing import Any

from gpuprov.host.contract import PROBE_FILE_MAX_BYTES


def read_files(files: Sequence[str], globs: Sequence[str]) -> dict[str, Any]:
    """Each file's text; ``None`` when it does not exist, ``{"error": why}`` when it is not read
    (larger than ``PROBE_FILE_MAX_BYTES``, not a regular file, unreadable). Globs add every
    matching regular file.

    >>> read_files(["/nonexistent", "/dev/zero"], [])
    {'/nonexistent': None, '/dev/zero': {'error': 'not a regular file (character device)'}}
    """
    paths = list(files)
    for pattern in globs:
        paths += sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
    return {path: read_file(path) for path in paths}


def read_file(path: str, limit: int = PROBE_FILE_MAX_BYTES) -> str | dict[str, str] | None:
    """One file as ``read_files`` reports it, never reading more than ``limit`` + 1 bytes."""
    try:
        # O_NONBLOCK: opening a FIFO that has no writer must not wait for one.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        return {"error": f"unreadable: {e.strerror}"}
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return {"error": f"not a regular file ({_file_kind(info.st_mode)})"}
        if info.st_size > limit:
            return {"error": f"larger than {limit} bytes ({info.st_size}); the probe reads no more"}
        chunks, size = [], 0
        while size <= limit:  # st_size can be 0 for files whose size the kernel does not know
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            return {"error": f"larger than {limit} bytes; the probe reads no more"}
        return b"".join(chunks).decode("utf-8", errors="replace")
    except OSError as e:
        return {"error": f"unreadable: {e.strerror}"}
    finally:
        os.close(fd)


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    )
    return next((name for test, name in kinds if test(mode)), "special file")
