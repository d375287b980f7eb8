"""Reset GPUs so a pending MIG mode becomes current, stopping their clients if they block it.

NVML has no reset call; like mig-parted we run ``nvidia-smi -r -i <GPUs>`` (NVIDIA/mig-parted
apply/mode.go, "Mode
change"). Unlike mig-parted we reset only the GPUs whose mode changes. Any driver client blocks a
reset ("In use by another client"), so when the first try is refused the active systemd units
among ``gpu_clients`` are stopped, the reset is tried once more, and the units are started again.

>>> reset([0, 2], clients=("nvidia-persistenced",))     # doctest: +SKIP
Reset(ok=True, stopped=('nvidia-persistenced',), message='')
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Reset:
    """The outcome: ``stopped`` lists the units stopped (and started again) for the retry."""

    ok: bool
    stopped: tuple[str, ...]
    message: str


def reset(indices: Sequence[int], clients: Sequence[str]) -> Reset:
    """Reset the GPUs ``indices``; retry once with the active ``clients`` stopped."""
    ok, message = _nvidia_smi_reset(indices)
    if ok:
        return Reset(True, (), "")
    stopped = tuple(unit for unit in clients if _systemctl("is-active", "--quiet", unit))
    if not stopped:
        return Reset(False, (), message)
    try:
        for unit in stopped:
            if not _systemctl("stop", unit):
                return Reset(False, stopped, f"{message}; and `systemctl stop {unit}` failed")
        ok, message = _nvidia_smi_reset(indices)
    finally:
        # Started again whatever happened: the node must not be left without its GPU services.
        for unit in reversed(stopped):
            _systemctl("start", unit)
    return Reset(ok, stopped, "" if ok else message)


def _nvidia_smi_reset(indices: Sequence[int]) -> tuple[bool, str]:
    command = ["nvidia-smi", "-r", "-i", ",".join(str(i) for i in indices)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        return False, "nvidia-smi is not installed (it is needed to reset the GPUs)"
    text = " ".join((done.stdout + done.stderr).split()) or f"exit {done.returncode}"
    return done.returncode == 0, f"`{' '.join(command)}` failed: {text}"


def _systemctl(*args: str) -> bool:
    try:
        return (
            subprocess.run(["systemctl", *args], capture_output=True, check=False).returncode == 0
        )
    except FileNotFoundError:  # no systemd (a container): there are no units to stop
        return False
