"""What a ``vgpu`` host advertises: HAMi-core shares of each GPU, under its flavour's names.

Pure arithmetic over the checked group data and the catalog's memory; the planner calls it and
carries the result in ``HostPlan.vgpu``. Both flavours run a device plugin built on HAMi-core:

- ``hami``: the plugin registers only the share count with the kubelet (``nvidia.com/gpu``,
  GPUs x split); memory (MiB x memory scaling) and cores (100 x core scaling) per GPU go into
  the node's ``hami.io/node-nvidia-register`` annotation, which HAMi's scheduler reads
  (https://github.com/Project-HAMi/HAMi/blob/5f48554bd4169d934d93fa9748296cc99992c301/docs/develop/protocol.md).
- ``volcano``: the plugin registers all three with the kubelet: ``volcano.sh/vgpu-number``
  (GPUs x split), ``volcano.sh/vgpu-memory`` (each GPU's MiB // memory factor, without the
  scaling) and ``volcano.sh/vgpu-cores`` (100 per GPU, without the scaling)
  (`apiDevices` and `initialize` in
  https://github.com/Project-HAMi/volcano-vgpu-device-plugin/blob/07e056790e20769b898252195371dfefcbe4a8d3/pkg/plugin/vgpu/plugin.go,
  `GetDevices` in pkg/plugin/vgpu/util/util.go; the three plugins in
  https://github.com/Project-HAMi/volcano-vgpu-device-plugin/blob/730f72887f209a3439e3348481dce65cf169d553/pkg/plugin/vgpu/mig-strategy.go).

>>> shares = Vgpu.of("volcano", 81920, 8, split_count=10, memory_factor=1)
>>> shares.advertised
{'volcano.sh/vgpu-number': 80, 'volcano.sh/vgpu-memory': 655360, 'volcano.sh/vgpu-cores': 800}
>>> Vgpu.of("hami", 81920, 8, split_count=10).allocatable
{'nvidia.com/gpu': 80}
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuprov.core.memory_budget import ShareMemory
from gpuprov.host.contract import VGPU_CORES_PER_GPU, VGPU_RESOURCES


@dataclass(frozen=True)
class Vgpu:
    """A ``vgpu`` host's shares. ``advertised``: per resource name, what the flavour's scheduler
    counts on the node; ``allocatable``: the part the kubelet shows in ``status.allocatable``."""

    # Each field of an inventory key names it (gpuprov.core.plan_areas: Vgpu is the area of the
    # vgpu_* keys); the rest is worked out from them.
    flavour: str = field(metadata={"key": "vgpu_flavour"})
    split_count: int = field(metadata={"key": "vgpu_split_count"})
    memory_scaling: float = field(metadata={"key": "vgpu_memory_scaling"})
    core_scaling: float = field(metadata={"key": "vgpu_core_scaling"})
    memory_factor: int = field(metadata={"key": "vgpu_memory_factor"})
    advertised: dict[str, int] = field(metadata={"derived": True})
    allocatable: dict[str, int] = field(metadata={"derived": True})
    # What one share may use (``memory_per_share_gib``, else an even split); the planner sets it.
    memory: ShareMemory | None = field(default=None, metadata={"derived": True})

    @classmethod
    def of(
        cls,
        flavour: str,
        memory_mib: int,
        gpu_count: int,
        split_count: int,
        memory_scaling: float = 1,
        core_scaling: float = 1,
        memory_factor: int = 1,
    ) -> Vgpu:
        """The shares of ``gpu_count`` GPUs of ``memory_mib`` each (the plugins read each GPU's
        total memory from NVML; the catalog's figure stands for it)."""
        count_name, memory_name, cores_name = VGPU_RESOURCES[flavour]
        count = gpu_count * split_count
        if flavour == "hami":
            # The plugin truncates the scaled values to whole MiB and percent per GPU.
            memory = gpu_count * int(memory_mib * memory_scaling)
            cores = gpu_count * int(VGPU_CORES_PER_GPU * core_scaling)
            allocatable = {count_name: count}
        else:
            memory = gpu_count * (memory_mib // memory_factor)
            cores = gpu_count * VGPU_CORES_PER_GPU
            allocatable = {count_name: count, memory_name: memory, cores_name: cores}
        advertised = {count_name: count, memory_name: memory, cores_name: cores}
        return cls(
            flavour,
            split_count,
            memory_scaling,
            core_scaling,
            memory_factor,
            advertised,
            allocatable,
        )

    def as_dict(self) -> dict:
        return {
            "flavour": self.flavour,
            "split_count": self.split_count,
            "memory_scaling": self.memory_scaling,
            "core_scaling": self.core_scaling,
            "memory_factor": self.memory_factor,
            "advertised": self.advertised,
            "allocatable": self.allocatable,
            "memory_per_share": self.memory.as_dict() if self.memory else None,
        }
