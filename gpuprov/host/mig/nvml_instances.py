"""GPU and compute instances through pynvml: create at an exact placement, destroy.

The thin NVML edge of the applier; the decisions are in ``gpuprov/host/mig/diff.py`` and reading the
state is the probe's (``gpuprov/host/agent/probe.py``). Every call goes through nvidia-ml-py's wrappers, so
on a host it is the real driver, in tests the simulated one.

>>> gi = create_gpu_instance(device, Instance(4, 4, "3g.40gb", 9))  # doctest: +SKIP
>>> create_full_compute_instance(gi, 3)                           # doctest: +SKIP
0
>>> destroy(device, gpu_instance_id(gi))                          # doctest: +SKIP
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable, Iterator
from typing import Any

import pynvml

from gpuprov.host.contract import NVML_PROFILE_ABSENT
from gpuprov.host.mig.instance import Instance

# Plain CI profiles in order of slice count. The REV1/NVL variants are special-purpose and never
# the "full" CI of a GI (pynvml NVML_COMPUTE_INSTANCE_PROFILE_*).
_FULL_CI_CANDIDATES = (
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE,
)
# What NVML answers for a profile constant this GPU or GI does not have (mig-parted skips both).


class InstanceError(Exception):
    """NVML offers no way to do what the plan needs (no CI profile spans the whole GI)."""


def create_gpu_instance(device: Any, target: Instance) -> Any:
    """Create the GI of ``target`` exactly at its placement; returns the GI handle."""
    placement = pynvml.c_nvmlGpuInstancePlacement_t(target.start, target.size)
    # The C function takes a pointer to the placement; pynvml passes the argument through as is.
    return pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(
        device, target.profile_id, ctypes.byref(placement)
    )


def gpu_instance_id(gpu_instance: Any) -> int:
    """The GI's id, the number ``nvidia-smi mig -lgi`` shows."""
    return pynvml.nvmlGpuInstanceGetInfo(gpu_instance).id


def create_full_compute_instance(gpu_instance: Any, slices: int) -> int:
    """Give the GI its one CI spanning all ``slices`` compute slices; returns the CI id."""
    for info in _ci_profiles(gpu_instance, _FULL_CI_CANDIDATES):
        if info.sliceCount == slices:
            ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gpu_instance, info.id)
            return pynvml.nvmlComputeInstanceGetInfo(ci).id
    raise InstanceError(f"no compute instance profile spans all {slices} slices of the GI")


def destroy(device: Any, gi_id: int) -> None:
    """Destroy GI ``gi_id`` of ``device``, its compute instances first (NVML refuses otherwise)."""
    gpu_instance = pynvml.nvmlDeviceGetGpuInstanceById(device, gi_id)
    seen: set[int] = set()
    for info in _ci_profiles(gpu_instance, range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT)):
        if info.id in seen:  # two constants may name one profile; list its CIs once
            continue
        seen.add(info.id)
        handles = (pynvml.c_nvmlComputeInstance_t * max(info.instanceCount, 1))()
        count = ctypes.c_uint(len(handles))
        pynvml.nvmlGpuInstanceGetComputeInstances(
            gpu_instance, info.id, handles, ctypes.byref(count)
        )
        for ci in handles[: count.value]:
            pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gpu_instance)


def _ci_profiles(gpu_instance: Any, consts: Iterable[int]) -> Iterator[Any]:
    """The CI profile infos of ``consts`` that this GI has (others are skipped)."""
    for const in consts:
        try:
            yield pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gpu_instance, const, pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
            )
        except pynvml.NVMLError as e:
            if e.value not in NVML_PROFILE_ABSENT:
                raise
