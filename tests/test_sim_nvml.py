"""The simulated ``libnvidia-ml.so.1`` through nvidia-ml-py's own wrappers and loader:
enumeration, profile info, placements and MIG devices (the MIG rules and faults are
tests/test_nvml_sim_rules.py)."""

from __future__ import annotations

import ctypes

import pynvml
import pytest
from gpuprov_lab.sim import state
from gpuprov_lab.sim.libnvml import build
from simulated import initialized, new_host, use


@pytest.fixture
def a100(tmp_path):
    """Two A100-80GB, GPU 0 with MIG on; pynvml initialized against them."""
    path = new_host(tmp_path, "A100-80GB", 2, mig=[0])
    use(path)
    with initialized():
        yield path


def _device(index=0):
    return pynvml.nvmlDeviceGetHandleByIndex(index)


def _at(device, profile_id, start, size):
    placement = pynvml.c_nvmlGpuInstancePlacement_t(start, size)
    return pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(
        device, profile_id, ctypes.byref(placement)
    )


def _placement(gi):
    info = pynvml.nvmlGpuInstanceGetInfo(gi)
    return info.profileId, info.placement.start, info.placement.size


# -- enumeration ---------------------------------------------------------------------------


def test_devices_enumerate_with_catalog_names_memory_and_stable_ids(tmp_path, a100):
    assert pynvml.nvmlDeviceGetCount() == 2
    assert pynvml.nvmlSystemGetDriverVersion() == build.DEFAULT_DRIVER_VERSION
    assert pynvml.nvmlSystemGetNVMLVersion() == f"12.{build.DEFAULT_DRIVER_VERSION}"
    devices = [_device(0), _device(1)]
    assert [pynvml.nvmlDeviceGetName(d) for d in devices] == ["NVIDIA A100-SXM4-80GB"] * 2
    assert [pynvml.nvmlDeviceGetIndex(d) for d in devices] == [0, 1]
    assert pynvml.nvmlDeviceGetMemoryInfo(devices[0]).total == 81920 * 1024 * 1024
    memory = pynvml.nvmlDeviceGetMemoryInfo(devices[0], version=pynvml.nvmlMemory_v2)
    assert memory.total == 81920 * 1024 * 1024
    pci = pynvml.nvmlDeviceGetPciInfo(devices[1])
    assert (pci.busId, pci.bus, pci.pciDeviceId) == ("00000000:17:00.0", 0x17, 0x20B210DE)
    uuids = [pynvml.nvmlDeviceGetUUID(d) for d in devices]
    assert len(set(uuids)) == 2 and all(u.startswith("GPU-") for u in uuids)
    # The same seed gives the same GPUs (a lab host rebuilt keeps its UUIDs); another does not.
    for seed, same in (("test-host", True), ("other", False)):
        again = new_host(tmp_path / seed, "A100-80GB", 2, seed=seed)
        assert (uuids == [gpu["uuid"] for gpu in state.load(again)["gpus"]]) is same
    by_uuid = pynvml.nvmlDeviceGetHandleByUUID(uuids[1])
    assert pynvml.nvmlDeviceGetIndex(by_uuid) == 1
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        _device(2)


def test_calls_before_init_or_after_shutdown_are_uninitialized(tmp_path):
    use(new_host(tmp_path))
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()
    with initialized():
        assert pynvml.nvmlDeviceGetCount() == 1
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


# -- GI profiles ---------------------------------------------------------------------------


def test_profile_info_is_looked_up_by_const_and_carries_the_profile_id(a100):
    device = _device(0)
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(
        device, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2
    )
    assert (info.id, info.name, info.sliceCount, info.instanceCount, info.memorySizeMB) == (
        15,
        "MIG 1g.20gb",
        1,
        4,
        19968,
    )
    legacy = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(device, 2, version=1)
    assert (legacy.id, legacy.sliceCount) == (9, 3)
    assert pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(device, 9).name == "MIG 3g.40gb"
    with pytest.raises(pynvml.NVMLError_NotSupported):  # 8_SLICE: not on an A100
        pynvml.nvmlDeviceGetGpuInstanceProfileInfo(device, pynvml.NVML_GPU_INSTANCE_PROFILE_8_SLICE)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetGpuInstanceProfileInfo(device, pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)


def test_profile_info_with_a_wrong_struct_version_is_a_version_mismatch(a100):
    info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
    info.version = 1
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetGpuInstanceProfileInfoV")
    assert fn(_device(0), 0, ctypes.byref(info)) == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH


def test_possible_placements_come_from_the_catalog_whatever_the_mig_mode(a100):
    for index in (0, 1):
        count = ctypes.c_uint()
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(
            _device(index), 14, None, ctypes.byref(count)
        )
        placements = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(
            _device(index), 14, placements, ctypes.byref(count)
        )
        assert [(p.start, p.size) for p in placements] == [(0, 2), (2, 2), (4, 2)]


# -- GI creation ---------------------------------------------------------------------------


def test_listing_gpu_instances_by_profile_id(a100):
    device = _device(0)
    _at(device, 19, 6, 1)
    _at(device, 19, 1, 1)
    _at(device, 14, 2, 2)
    handles = (pynvml.c_nvmlGpuInstance_t * 7)()
    count = ctypes.c_uint()
    pynvml.nvmlDeviceGetGpuInstances(device, 19, handles, ctypes.byref(count))
    assert sorted(_placement(h)[1] for h in handles[: count.value]) == [1, 6]


# -- MIG devices ---------------------------------------------------------------------------


def test_mig_devices_carry_their_slices_and_memory_as_attributes(a100):
    device = _device(0)
    gi = _at(device, 9, 4, 4)
    pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)  # 1 of the GI's 3 slices
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(device, 0)
    attributes = pynvml.nvmlDeviceGetAttributes(mig)
    assert (
        attributes.gpuInstanceSliceCount,
        attributes.computeInstanceSliceCount,
        attributes.memorySizeMB,
    ) == (3, 1, 40192)
    with pytest.raises(pynvml.NVMLError_NotSupported):  # nvml.h: MIG device handles only
        pynvml.nvmlDeviceGetAttributes(device)
    ci_id = pynvml.nvmlDeviceGetComputeInstanceId(mig)
    ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id)
    assert pynvml.nvmlComputeInstanceGetInfo(ci).id == ci_id
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id + 1)


def test_a_mig_off_gpu_has_room_for_no_mig_devices(a100):
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(_device(1)) == 0
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(_device(0)) == 7


def test_minor_numbers_compute_capability_and_cuda_version_come_from_index_catalog_driver(a100):
    assert [pynvml.nvmlDeviceGetMinorNumber(_device(i)) for i in (0, 1)] == [0, 1]
    assert pynvml.nvmlDeviceGetCudaComputeCapability(_device(0)) == (8, 0)
    assert pynvml.nvmlSystemGetCudaDriverVersion() == 12000
