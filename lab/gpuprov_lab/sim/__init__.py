"""The simulated NVIDIA driver: GPUs that live in a JSON state file instead of a PCI slot.

One simulator: the C ``libnvidia-ml.so.1`` in ``libnvml`` (with its programs ``nvidia-smi`` and
``gpuprov-sim``), which every NVML client loads by name exactly as it loads the real library; on
a lab host the driver packages install it where Debian's driver puts NVML. gpuprov knows nothing
of it. Beside it: ``contract`` (its names and paths), ``state`` (the state file's format, for
the lab and tests that make a host) and ``caps`` (the MIG capability minors NVIDIA's device
plugin reads).

>>> from gpuprov_lab.sim.libnvml import build
>>> build.build().programs["nvidia-smi"].name   # doctest: +SKIP
'nvidia-smi'
"""
