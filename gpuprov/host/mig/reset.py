"""Reset GPUs so a pending MIG mode becomes current, with their clients stopped around it.

NVML has no reset call; like mig-parted we run ``nvidia-smi -r -i <GPUs>`` (NVIDIA/mig-parted
apply/mode.go, "Mode change"). Unlike mig-parted we reset only the GPUs whose mode changes. Any
driver client blocks a reset ("In use by another client"), so the applier stops the active
units among ``gpu_clients`` first (``clients_stopped``), and starts them again, in reverse
order, when the change is over, whatever its outcome.

>>> with clients_stopped(("nvidia-persistenced.service",)) as stopped:   # doctest: +SKIP
...     ok, message = reset([0, 2])
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator, Sequence

from gpuprov.host.gpu_clients import to_stop


class ClientsError(Exception):
    """A GPU client could not be stopped (nothing was changed), or not started again."""


def reset(indices: Sequence[int]) -> tuple[bool, str]:
    """Reset the GPUs ``indices``: (True, "") or (False, nvidia-smi's message)."""
    command = ["nvidia-smi", "-r", "-i", ",".join(str(i) for i in indices)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        return False, "nvidia-smi is not installed (it is needed to reset the GPUs)"
    text = " ".join((done.stdout + done.stderr).split()) or f"exit {done.returncode}"
    return (
        done.returncode == 0,
        "" if done.returncode == 0 else f"`{' '.join(command)}` failed: {text}",
    )


@contextlib.contextmanager
def clients_stopped(clients: Sequence[str]) -> Iterator[tuple[str, ...]]:
    """Stop the active units of ``clients`` (in order) for the ``with`` body; yields them.

    They start again in reverse order when the body ends, also when it raises. ClientsError
    when one does not stop (before the body runs) or does not start again. Only active units are
    stopped and started, so at boot a unit ordered after ``gpuprov-mig.service`` (the kubelet)
    is never started, and waited for, from inside it: the deadlock mig-parted v0.14.3 avoided
    with ``systemctl --no-block``.
    """
    stopped: list[str] = []
    try:
        active = {unit for unit in clients if _systemctl("is-active", "--quiet", unit)}
        for unit in to_stop(clients, active):
            if not _systemctl("stop", unit):
                raise ClientsError(f"`systemctl stop {unit}` failed; the GPUs were not changed")
            stopped.append(unit)
        yield tuple(stopped)
    except BaseException as e:
        # Started again whatever happened: the node must not be left without its GPU services.
        failed = _start(stopped)
        if failed:
            raise ClientsError(f"{e}; and `systemctl start` failed for {failed}") from e
        raise
    failed = _start(stopped)
    if failed:
        raise ClientsError(f"`systemctl start` failed for {failed} after the change")


def _start(units: Sequence[str]) -> str:
    """Start ``units`` in reverse order; the ones that failed, as a list for a message."""
    return ", ".join(unit for unit in reversed(units) if not _systemctl("start", unit))


def _systemctl(*args: str) -> bool:
    try:
        return (
            subprocess.run(["systemctl", *args], capture_output=True, check=False).returncode == 0
        )
    except FileNotFoundError:  # no systemd (a container): there are no units to stop
        return False
