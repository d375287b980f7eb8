"""Point a process's pynvml at the simulated ``libnvidia-ml.so.1``, through pynvml's own loader.

pynvml loads NVML with ``CDLL("libnvidia-ml.so.1")`` the first time it needs it, as on a real
host. glibc's loader answers a dlopen by a bare name with an object already loaded whose
SONAME is that name, so once a process has loaded the built library by its path (RTLD_GLOBAL),
pynvml's own load resolves to it; nothing sets ``pynvml.nvmlLib``. A child process gets the same
through ``LD_LIBRARY_PATH`` (``environment``). Either way pynvml must not have loaded another
NVML before (``pynvml.nvmlLib`` is None).

>>> preload()                                               # doctest: +SKIP
PosixPath('/var/tmp/gpuprov-libnvml-.../libnvidia-ml.so.1')
>>> pynvml.nvmlInit()  # the simulated GPUs of $GPUPROV_NVML_SIM  # doctest: +SKIP
>>> subprocess.run(["nvidia-device-plugin"], env=environment())  # doctest: +SKIP
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping
from pathlib import Path

from gpuprov_lab.sim.libnvml import build

# A symbol only the simulated library has: the object behind the soname is ours.
_OURS = "gpuprovSimLastError"


def preload(library: Path | None = None) -> Path:
    """Load ``library`` (default: the built one) by path, so that ``libnvidia-ml.so.1`` is it.

    Raises RuntimeError when this process already has another ``libnvidia-ml.so.1`` (a real
    driver's): glibc would keep answering with that one.
    """
    path = library or build.library()
    ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    if not hasattr(ctypes.CDLL(build.LIBRARY), _OURS):
        raise RuntimeError(f"this process loaded another {build.LIBRARY} before {path}")
    return path


def environment(
    library: Path | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``base`` (default: this process's environment) with the library's directory first on
    ``LD_LIBRARY_PATH``, for a child process that loads ``libnvidia-ml.so.1`` itself."""
    path = library or build.library()
    env = dict(os.environ if base is None else base)
    rest = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = f"{path.parent}:{rest}" if rest else str(path.parent)
    return env
