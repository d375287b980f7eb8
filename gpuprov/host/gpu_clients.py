"""GPU clients around a GPU reset or a MIG mode change: who holds the GPUs, what to stop, what
blocks the change.

Any process with a ``/dev/nvidia*`` node open blocks a reset ("In use by another client",
consumers.md), and so does the ``nvidia_drm`` kernel module, which no stopped unit releases
(NVIDIA/mig-parted#181). So before a reset the host-side applier lists every holder
(``gpuprov/host/gpu_holders.py`` reads ``/proc``), stops the active units among the group
data's ``gpu_clients`` (``to_stop``), lists the holders again and refuses the change, naming each
one that is left (``blocking``), instead of resetting into a failure. Pure: the lists come in as
plain data; stdlib only, because it ships inside the host bundle.

>>> owner("0::/system.slice/gpu-holder.service\\n")
('gpu-holder.service', None)
>>> holder = Holder(4242, "sleep infinity", "gpu-holder.service", None, ("/dev/nvidia0",))
>>> holder.describe()
'pid 4242 (sleep infinity) of unit gpu-holder.service holds /dev/nvidia0'
>>> [h.pid for h in blocking([holder], own_pids={1})]
[4242]
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

# A container id as containerd, CRI-O, Docker and Podman name them: 64 hex digits, alone or as
# ``<runtime>-<id>.scope`` under the systemd cgroup driver.
_CONTAINER = re.compile(r"^(?:[a-z-]+-)?([0-9a-f]{64})(?:\.scope)?$")
_UNIT_SUFFIXES = (".service", ".scope")
DRM_MODULE = "nvidia_drm"
# Why a loaded nvidia_drm is a refusal, not something to stop (consumers.md, mig.md).
DRM_BLOCKS = (
    f"the {DRM_MODULE} kernel module is loaded, and a GPU reset cannot succeed while it is "
    "(NVIDIA/mig-parted#181): unload it (`modprobe -r nvidia_drm`, after stopping the display "
    "manager) or let a reboot apply the MIG mode (mig_reboot: true)"
)
MAX_NAMED = 10  # holders named in one message; the rest are counted


@dataclass(frozen=True)
class Holder:
    """A process with NVIDIA device nodes open: its pid, command line, systemd unit and
    container id (each None when its cgroup does not say)."""

    pid: int
    command: str
    unit: str | None
    container: str | None
    devices: tuple[str, ...]

    def describe(self) -> str:
        owners = []
        if self.unit:
            owners.append(f"unit {self.unit}")
        if self.container:
            owners.append(f"container {self.container[:12]}")
        owner = f" of {', '.join(owners)}" if owners else ""
        return f"pid {self.pid} ({self.command}){owner} holds {', '.join(self.devices)}"


def owner(cgroup: str) -> tuple[str | None, str | None]:
    """(systemd unit, container id) from the text of ``/proc/PID/cgroup``.

    The unified hierarchy's line (``0::``) is read, else systemd's own (``name=systemd``): the
    innermost ``.service``/``.scope`` is the unit, a 64-hex component the container.

    >>> unit, container = owner("0::/kubepods.slice/cri-containerd-" + "a" * 64 + ".scope")
    >>> unit[:20], container[:4]
    ('cri-containerd-aaaaa', 'aaaa')
    >>> owner("12:cpu:/x\\n1:name=systemd:/kubepods/besteffort/pod1/" + "b" * 12)
    (None, None)
    >>> owner("1:name=systemd:/system.slice/docker-" + "c" * 64 + ".scope")[1][:4]
    'cccc'
    """
    paths = {}
    for line in cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            paths["unified"] = path
        elif controllers == "name=systemd":
            paths["systemd"] = path
    path = paths.get("unified") or paths.get("systemd") or ""
    unit = container = None
    for part in path.split("/"):
        if part.endswith(_UNIT_SUFFIXES):
            unit = part
        match = _CONTAINER.match(part)
        if match:
            container = match[1]
    return unit, container


def to_stop(clients: Sequence[str], active: Collection[str]) -> tuple[str, ...]:
    """The units of ``clients`` to stop, in their order (they start again in reverse): the
    active ones.

    >>> to_stop(["kubelet.service", "nvsm.service", "nvidia-persistenced.service"],
    ...         {"nvidia-persistenced.service", "kubelet.service"})
    ('kubelet.service', 'nvidia-persistenced.service')
    """
    return tuple(unit for unit in dict.fromkeys(clients) if unit in active)


def blocking(holders: Iterable[Holder], own_pids: Collection[int]) -> list[Holder]:
    """The holders that block a reset: every one but the applier itself (NVML, which the
    applier uses, opens the device nodes too), by pid."""
    return sorted((h for h in holders if h.pid not in own_pids), key=lambda h: h.pid)


def blocked_message(gpus: str, holders: Sequence[Holder], stopped: Sequence[str]) -> str:
    """Why the MIG mode of ``gpus`` is not changed: the holders left after stopping ``stopped``.

    >>> blocked_message("0", [Holder(7, "x", None, None, ("/dev/nvidia0",))], ())
    'GPU 0: not reset, the GPUs are in use: pid 7 (x) holds /dev/nvidia0; stop them, or list their units in gpu_clients'
    """
    named = "; ".join(h.describe() for h in holders[:MAX_NAMED])
    if len(holders) > MAX_NAMED:
        named += f"; and {len(holders) - MAX_NAMED} more processes"
    after = f" after stopping {', '.join(stopped)}" if stopped else ""
    return (
        f"GPU {gpus}: not reset, the GPUs are in use{after}: {named}; stop them, or list their "
        "units in gpu_clients"
    )
