"""GPU health: what the NVIDIA driver says about a GPU's fitness to take work (docs/health.md).

``xid`` holds NVIDIA's XID codes and the kernel-log line format (pure data); ``kernel_log``
reads the kernel's log on a host, ``nvml`` the per-GPU NVML counters (both run in the probe).
The verdicts are ``gpuprov.core.checks.health``'s.
"""
