"""The GPUs as NVML reports them: one GPU's identity, MIG mode and its GPU and compute instances.

GI profiles are walked the way mig-parted does: every NVML_GPU_INSTANCE_PROFILE_* constant gives
a profile info whose ``id`` (the other numbering, the one ``-cgi`` and
``GpuInstanceInfo.profileId`` use) lists that profile's GIs. ``profile`` comes from the GI
profile info ``name`` (``"MIG 3g.40gb"`` -> ``"3g.40gb"``).

>>> pynvml.nvmlInit(); read_gpu(0)["mig"]          # doctest: +SKIP
{'current': True, 'pending': True}
"""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml

from gpuprov.host.contract import NVML_PROFILE_ABSENT


def read_gpu(index: int) -> dict[str, Any]:
    device = pynvml.nvmlDeviceGetHandleByIndex(index)
    gpu: dict[str, Any] = {
        "index": index,
        "uuid": pynvml.nvmlDeviceGetUUID(device),
        "name": pynvml.nvmlDeviceGetName(device),
        "memory_total_mib": pynvml.nvmlDeviceGetMemoryInfo(device).total // (1024 * 1024),
        "pci_bus_id": pynvml.nvmlDeviceGetPciInfo(device).busId,
        "mig": None,
        "gpu_instances": [],
    }
    try:
        current, pending = pynvml.nvmlDeviceGetMigMode(device)
    except pynvml.NVMLError_NotSupported:
        return gpu
    gpu["mig"] = {
        "current": current == pynvml.NVML_DEVICE_MIG_ENABLE,
        "pending": pending == pynvml.NVML_DEVICE_MIG_ENABLE,
    }
    if gpu["mig"]["current"]:
        gpu["gpu_instances"] = _gpu_instances(device)
        uuids = _mig_device_uuids(device)
        for gi in gpu["gpu_instances"]:
            for ci in gi["compute_instances"]:
                ci["uuid"] = uuids.get((gi["id"], ci["id"]))
    return gpu


def _mig_device_uuids(device: Any) -> dict[tuple[int, int], str]:
    """(GPU instance id, compute instance id) -> the UUID of that MIG device (``MIG-...``), the
    id NVIDIA's device plugin gives a container of it (``NVIDIA_VISIBLE_DEVICES``)."""
    found = {}
    for position in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(device)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(device, position)
        except pynvml.NVMLError_NotFound:  # MIG devices need not fill the slots in order
            continue
        key = (pynvml.nvmlDeviceGetGpuInstanceId(mig), pynvml.nvmlDeviceGetComputeInstanceId(mig))
        found[key] = pynvml.nvmlDeviceGetUUID(mig)
    return found


def _profiles(lookup: Any, count: int) -> list[Any]:
    """Profile infos for constants 0..count-1 that exist (``lookup(const)``)."""
    found = []
    for const in range(count):
        try:
            found.append(lookup(const))
        except pynvml.NVMLError as e:
            if e.value not in NVML_PROFILE_ABSENT:
                raise
    return found


def _gpu_instances(device: Any) -> list[dict[str, Any]]:
    instances = []
    for profile in _profiles(
        lambda c: pynvml.nvmlDeviceGetGpuInstanceProfileInfo(device, c),
        pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT,
    ):
        handles = (pynvml.c_nvmlGpuInstance_t * profile.instanceCount)()
        count = ctypes.c_uint(profile.instanceCount)
        pynvml.nvmlDeviceGetGpuInstances(device, profile.id, handles, ctypes.byref(count))
        for handle in handles[: count.value]:
            info = pynvml.nvmlGpuInstanceGetInfo(handle)
            instances.append(
                {
                    "id": info.id,
                    "profile_id": info.profileId,
                    "profile": profile.name.removeprefix("MIG "),
                    "start": info.placement.start,
                    "size": info.placement.size,
                    "compute_instances": _compute_instances(handle),
                }
            )
    return sorted(instances, key=lambda gi: (gi["start"], gi["id"]))


def _compute_instances(gpu_instance: Any) -> list[dict[str, Any]]:
    shared = pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    found = []
    for profile in _profiles(
        lambda c: pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gpu_instance, c, shared),
        pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT,
    ):
        handles = (pynvml.c_nvmlComputeInstance_t * profile.instanceCount)()
        count = ctypes.c_uint(profile.instanceCount)
        pynvml.nvmlGpuInstanceGetComputeInstances(
            gpu_instance, profile.id, handles, ctypes.byref(count)
        )
        for handle in handles[: count.value]:
            info = pynvml.nvmlComputeInstanceGetInfo(handle)
            found.append(
                {"id": info.id, "profile_id": info.profileId, "slice_count": profile.sliceCount}
            )
    return sorted(found, key=lambda ci: ci["id"])
