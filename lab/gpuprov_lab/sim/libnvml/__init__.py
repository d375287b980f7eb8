"""The simulated driver's C library: ``libnvidia-ml.so.1`` for programs that load NVML themselves.

NVIDIA's device plugin (Go) and other C consumers dlopen ``libnvidia-ml.so.1``; in the lab that
is this library, compiled from ``nvml_sim.c`` by ``build.library()``. It answers the read-only
NVML calls from the same state file and with the same rules as ``gpuprov_lab.sim.nvml`` (which
pynvml uses in gpuprov's own processes); ``tests/test_libnvml_parity.py`` proves the answers
equal. docs/nvml-sim.md lists what it serves.

>>> from gpuprov_lab.sim.libnvml import build
>>> build.library().name   # doctest: +SKIP
'libnvidia-ml.so.1'
"""
