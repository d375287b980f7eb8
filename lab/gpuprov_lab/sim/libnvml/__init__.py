"""The simulated driver's C library: ``libnvidia-ml.so.1`` for programs that load NVML themselves.

NVIDIA's device plugin (Go), HAMi's and Volcano's, pynvml and other C consumers dlopen
``libnvidia-ml.so.1``; in the lab that is this library, compiled with its programs
(``nvidia-smi``, ``gpuprov-sim``) by ``build.build()``. It answers NVML from the state file,
reading and changing it with the driver's rules (``tests/test_nvml_sim_rules.py``,
``tests/test_sim_nvml.py``), delivers XIDs as NVML events
(``tests/test_nvml_sim_events.py``), and exports the simulated hardware's switches (the
gpuprovSim* API, ``gpuprov_sim.h``). ``preload`` points a process's pynvml at it (tests). docs/nvml-sim.md
lists what it serves.

>>> from gpuprov_lab.sim.libnvml import build
>>> build.library().name   # doctest: +SKIP
'libnvidia-ml.so.1'
"""
