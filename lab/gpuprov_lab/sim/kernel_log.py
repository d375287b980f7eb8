"""The simulated host's kernel log: a file of ``/dev/kmsg`` records beside the state file.

Each record is one line as the kernel's ``/dev/kmsg`` gives it, ``PRIORITY,SEQUENCE,USEC,FLAGS;
MESSAGE`` (Documentation/ABI/testing/dev-kmsg in the Linux tree), so the probe parses the
simulated log and a real one alike. ``gpuprov-sim inject xid`` appends, ``gpuprov-sim boot``
empties it (the ring buffer starts anew at boot); the lab links ``/dev/kmsg`` to it.

>>> import tempfile, os
>>> state = os.path.join(tempfile.mkdtemp(), "gpus.json")
>>> append(state, "NVRM: Xid (PCI:0000:07:00): 79, pid=0, name=, GPU has fallen off the bus")
>>> open(path(state)).read().startswith("3,0,")
True
"""

from __future__ import annotations

import os
import time

from gpuprov_lab.sim import state as sim_state
from gpuprov_lab.sim.contract import SIM_KERNEL_LOG_NAME

# LOG_ERR (3) in facility kern (0): the level NVRM logs XIDs at.
PRIORITY = 3


def path(state_path: str) -> str:
    """The kernel log that belongs to the state file ``state_path``."""
    return os.path.join(os.path.dirname(os.path.abspath(state_path)), SIM_KERNEL_LOG_NAME)


def append(state_path: str, message: str) -> None:
    """Log ``message`` as the kernel would, numbered after the records already there."""
    log = path(state_path)
    with sim_state.locked(log):
        try:
            with open(log, "rb") as f:
                sequence = sum(1 for _ in f)
        except FileNotFoundError:
            sequence = 0
        usec = time.clock_gettime_ns(time.CLOCK_BOOTTIME) // 1000
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{PRIORITY},{sequence},{usec},-;{message}\n")
        os.chmod(log, 0o644)


def clear(state_path: str) -> None:
    """An empty log, as after a boot."""
    log = path(state_path)
    with sim_state.locked(log), open(log, "w", encoding="utf-8"):
        os.chmod(log, 0o644)
