"""Who holds the GPUs on this host, read from ``/proc``: every process with an NVIDIA device node
open, and whether the ``nvidia_drm`` module is loaded.

What ``fuser /dev/nvidia*`` answers, without needing psmisc: each ``/proc/PID/fd/*`` link that
points at ``/dev/nvidia*`` (``nvidia0``..., ``nvidiactl``, ``nvidia-uvm``,
``nvidia-caps/...``), with the process's command line and, from ``/proc/PID/cgroup``, its
systemd unit or container (``gpuprov.host.gpu_clients.owner``). Processes that end while being read,
or whose fds this user may not read, are skipped: the applier runs as root. Stdlib only: it runs
in the agent bundle.

>>> [h.describe() for h in holders()]                      # doctest: +SKIP
['pid 4242 (sleep infinity) of unit gpu-holder.service holds /dev/nvidia0']
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from gpuprov.host.contract import NVIDIA_DEVICE_PREFIX
from gpuprov.host.gpu_clients import DRM_MODULE, Holder, owner

COMMAND_MAX = 200  # characters of a command line shown in a message


@dataclass(frozen=True)
class System:
    """Where this host's processes and modules are read: ``/proc`` and ``/sys``, and the path
    every NVIDIA device node starts with (other roots hold a recorded host, in tests)."""

    proc: str = "/proc"
    sys: str = "/sys"
    devices: str = NVIDIA_DEVICE_PREFIX


THIS_HOST = System()


def holders(system: System = THIS_HOST) -> list[Holder]:
    """Every process with a file under ``system.devices`` open, by pid."""
    found = []
    for name in os.listdir(system.proc):
        if not name.isdigit():
            continue
        devices = _open_devices(os.path.join(system.proc, name, "fd"), system.devices)
        if not devices:
            continue
        unit, container = owner(_read(os.path.join(system.proc, name, "cgroup")))
        found.append(Holder(int(name), _command(system.proc, name), unit, container, devices))
    return sorted(found, key=lambda h: h.pid)


def drm_loaded(system: System = THIS_HOST) -> bool:
    """Whether the ``nvidia_drm`` kernel module is loaded (``/sys/module`` or ``/proc/modules``)."""
    if os.path.isdir(os.path.join(system.sys, "module", DRM_MODULE)):
        return True
    modules = _read(os.path.join(system.proc, "modules"))
    return any(line.split(" ", 1)[0] == DRM_MODULE for line in modules.splitlines())


def _open_devices(fd_dir: str, prefix: str) -> tuple[str, ...]:
    try:
        fds = os.listdir(fd_dir)
    except OSError:  # the process ended, or its fds are not ours to read
        return ()
    devices = set()
    for fd in fds:
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith(prefix):
            devices.add(target)
    return tuple(sorted(devices))


def _command(proc: str, pid: str) -> str:
    """The command line (arguments joined by spaces), else the kernel's short name."""
    argv = _read(os.path.join(proc, pid, "cmdline")).split("\0")
    line = " ".join(a for a in argv if a) or _read(os.path.join(proc, pid, "comm")).strip()
    line = "".join(c if c.isprintable() else "?" for c in line) or "?"
    return line if len(line) <= COMMAND_MAX else line[: COMMAND_MAX - 3] + "..."


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(1 << 16).decode("utf-8", "replace")
    except OSError:
        return ""
