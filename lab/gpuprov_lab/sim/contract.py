"""The simulated driver's names: its state file, the environment it reads, where the lab puts it.

They are the simulator's, not the product's: gpuprov knows none of them (a real host's pynvml
loads ``libnvidia-ml.so.1``, and on a lab host that is the simulated one). ``build.py`` writes
them into the C sources' generated header, so the library and these names cannot drift.

>>> SIM_NVML_LIBRARY_PATH
'/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1'
"""

SIM_SCHEMA = "gpuprov.sim/v1"  # the state file's schema
SIM_ENV = "GPUPROV_NVML_SIM"  # names the state file (default SIM_STATE_PATH); read on every call
SIM_TRACE_ENV = "GPUPROV_NVML_SIM_TRACE"  # the C library appends "<function> <rc>" lines there
SIM_STATE_PATH = "/var/lib/nvidia-sim/gpus.json"  # where the lab keeps it
# Where the real driver puts libnvidia-ml on Debian; the lab's libnvidia-ml1 installs the
# simulated library there.
SIM_NVML_LIBRARY_PATH = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
SIM_MIG_MINORS_PATH = "/proc/driver/nvidia-caps/mig-minors"  # read by NVIDIA's device plugin
# The simulated kernel log (kmsg records, ``gpuprov-sim inject xid``) beside the state file; the
# lab's driver package links KERNEL_LOG_PATH to it at boot, so the probe reads it as on a real host.
SIM_KERNEL_LOG_NAME = "kmsg"
