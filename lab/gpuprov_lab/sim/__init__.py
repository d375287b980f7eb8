"""The simulated NVIDIA driver: GPUs that live in a JSON state file instead of a PCI slot.

``install(path)`` is the one entry point gpuprov uses: when ``GPUPROV_NVML_SIM`` names a state
file, the probe and the applier call it before ``nvmlInit``, and from then on nvidia-ml-py's own
wrappers talk to the simulation (``nvml.py``) exactly as they would to ``libnvidia-ml.so.1``.
Nothing else in gpuprov knows the simulation exists. ``state.py`` holds the file format and the
reset/reboot rules, ``smi.py`` a ``nvidia-smi`` on top of pynvml, ``admin.py`` the lab's
``gpuprov-sim`` command (create a host, load/unload the driver, boot, inject faults).

>>> lib = install("/var/lib/gpuprov-sim/gpus.json")   # doctest: +SKIP
>>> pynvml.nvmlInit(); pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))  # doctest: +SKIP
'NVIDIA A100-SXM4-80GB'
"""

from __future__ import annotations

import os

from gpuprov_lab.sim.nvml import SimulatedNvml
from gpuprov_lab.sim.state import StateError, load

__all__ = ["SimulatedNvml", "StateError", "install"]


def install(path: str) -> SimulatedNvml:
    """Make pynvml use the simulated driver in state file ``path``; returns the library object.

    Sets ``pynvml.nvmlLib`` and empties pynvml's function-pointer cache, so functions looked up
    earlier (from another library object) are looked up again. A state file that exists but is
    malformed raises StateError with what is wrong (a missing one is "no driver installed", which
    ``nvmlInit`` reports as the real library would).
    """
    import pynvml

    if os.path.exists(path):
        load(path)
    lib = SimulatedNvml(path)
    with pynvml.libLoadLock:
        pynvml.nvmlLib = lib
        pynvml._nvmlGetFunctionPointer_cache.clear()
    return lib
