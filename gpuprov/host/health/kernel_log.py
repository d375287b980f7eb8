"""Read the XIDs the NVIDIA driver logged since boot from the kernel's log, bounded.

The probe reads ``/dev/kmsg`` itself rather than running ``journalctl -k -b``: it is the kernel's
own ring buffer (no journald needed, none of its storage settings in the way), costs no
process, and reads in a few system calls. It is opened with ``O_NONBLOCK`` because a read at the
end of ``/dev/kmsg`` otherwise waits for the next message (the kernel's
Documentation/ABI/testing/dev-kmsg describes reads that block at the end unless the file is
opened non-blocking); then the end reads ``EAGAIN``. A record
overwritten while reading reads ``EPIPE`` once and the next read continues. At most
``KERNEL_LOG_MAX_BYTES`` are read, so an odd file in its place cannot hold the probe. The
limit of this choice: the ring buffer forgets the oldest records on a chatty host, where the
journal might still have them (docs/health.md).

Lab hosts (systemd-nspawn) have no ``/dev/kmsg``; the simulated driver links it to a regular
file of the same records, which this reads the same way.

>>> log = read("/nonexistent/kmsg")
>>> log.error, log.xids
('no /nonexistent/kmsg', [])
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field

from gpuprov.host.contract import KERNEL_LOG_MAX_BYTES, KERNEL_LOG_PATH
from gpuprov.host.health import xid

_READ_SIZE = 1 << 16  # larger than any kmsg record (the kernel refuses a too small buffer)
_MARK = b"NVRM: Xid"


@dataclass
class KernelLog:
    """What the log said: each XID as (PCI key, code, message), or why it was not read."""

    path: str
    error: str | None = None
    truncated: bool = False
    xids: list[tuple[xid.PciKey, int, str]] = field(default_factory=list)


def read(path: str = KERNEL_LOG_PATH, limit: int = KERNEL_LOG_MAX_BYTES) -> KernelLog:
    """Every XID record in the kernel log at ``path``, reading at most ``limit`` bytes."""
    log = KernelLog(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        log.error = f"no {path}"
        return log
    except OSError as e:
        log.error = f"cannot open {path}: {e.strerror} (the probe reads it as root)"
        return log
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISREG(mode)):
            log.error = f"{path} is neither the kernel's device nor a file"
            return log
        _records(fd, limit, log)
    finally:
        os.close(fd)
    return log


def _records(fd: int, limit: int, log: KernelLog) -> None:
    size, rest = 0, b""
    while True:
        try:
            chunk = os.read(fd, _READ_SIZE)
        except BlockingIOError:
            break  # the end of /dev/kmsg
        except OSError as e:
            if e.errno == errno.EPIPE:
                continue  # records were overwritten under us; the next read goes on
            log.error = f"reading {log.path}: {e.strerror}"
            break
        if not chunk:
            break  # the end of a regular file
        if len(chunk) > limit - size:
            chunk = chunk[: limit - size]  # what fits is still read
            log.truncated = True
        size += len(chunk)
        # A file gives many records per read, the device one: keep a partial last line.
        joined = rest + chunk
        lines = joined.split(b"\n")
        rest = lines.pop()
        if _MARK in joined:
            _xids(lines, log)
        if log.truncated:
            return  # the partial last record is not read
    _xids([rest], log)


def _xids(lines: list[bytes], log: KernelLog) -> None:
    for line in lines:
        if _MARK not in line or line.startswith(b" "):  # " KEY=value" lines continue a record
            continue
        message = line.partition(b";")[2].decode("utf-8", errors="replace")
        found = xid.parse(message)
        if found is not None:
            log.xids.append((found[0], found[1], message))
