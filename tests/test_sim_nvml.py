"""The simulated driver through nvidia-ml-py's own wrappers: enumeration, MIG rules, faults."""

from __future__ import annotations

import ctypes
import json
import multiprocessing

import pynvml
import pytest
from gpuprov_lab.sim import install, state
from simulated import edit, initialized, isolate_pynvml, new_host

from gpuprov.core import catalog
from gpuprov.host.contract import SIM_SCHEMA


@pytest.fixture(autouse=True)
def _isolated(monkeypatch):
    isolate_pynvml(monkeypatch)


@pytest.fixture
def a100(tmp_path):
    """Two A100-80GB, GPU 0 with MIG on; pynvml initialized against them."""
    path = new_host(tmp_path, "A100-80GB", 2, mig=[0])
    lib = install(path)
    with initialized():
        yield path, lib


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
    path, _ = a100
    assert pynvml.nvmlDeviceGetCount() == 2
    assert pynvml.nvmlSystemGetDriverVersion() == state.DEFAULT_DRIVER_VERSION
    assert pynvml.nvmlSystemGetNVMLVersion() == f"12.{state.DEFAULT_DRIVER_VERSION}"
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
    same_seed = state.new_state("A100-80GB", 2, seed="test-host")
    assert uuids == [gpu["uuid"] for gpu in same_seed["gpus"]]
    assert uuids != [gpu["uuid"] for gpu in state.new_state("A100-80GB", 2, "other")["gpus"]]
    by_uuid = pynvml.nvmlDeviceGetHandleByUUID(uuids[1])
    assert pynvml.nvmlDeviceGetIndex(by_uuid) == 1
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        _device(2)


def test_calls_before_init_or_after_shutdown_are_uninitialized(tmp_path):
    install(new_host(tmp_path))
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()
    with initialized():
        assert pynvml.nvmlDeviceGetCount() == 1
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


def test_a_function_the_simulation_lacks_is_function_not_found(a100):
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetTemperature(_device(), pynvml.NVML_TEMPERATURE_GPU)


# -- MIG mode ------------------------------------------------------------------------------


def test_mig_mode_change_stays_pending_until_a_gpu_reset(a100):
    path, _ = a100
    device = _device(1)
    assert pynvml.nvmlDeviceGetMigMode(device) == [0, 0]
    status = pynvml.nvmlDeviceSetMigMode(device, pynvml.NVML_DEVICE_MIG_ENABLE)
    assert status == pynvml.NVML_ERROR_RESET_REQUIRED
    assert pynvml.nvmlDeviceGetMigMode(device) == [0, 1]
    with pytest.raises(pynvml.NVMLError_NotSupported):  # MIG is not *currently* enabled
        pynvml.nvmlDeviceCreateGpuInstance(device, 19)
    with edit(path) as host:
        assert state.reset_gpu(host, 1) is None
    assert pynvml.nvmlDeviceGetMigMode(device) == [1, 1]
    assert pynvml.nvmlDeviceGetMigMode(_device(0)) == [1, 1]


def test_mig_mode_on_a_busy_gpu_reports_in_use_and_the_reset_is_refused(a100):
    path, _ = a100
    with edit(path) as host:
        host["gpus"][1]["busy"] = True
    assert pynvml.nvmlDeviceSetMigMode(_device(1), 1) == pynvml.NVML_ERROR_IN_USE
    with edit(path) as host:
        assert state.reset_gpu(host, 1) == "In use by another client"
    assert pynvml.nvmlDeviceGetMigMode(_device(1)) == [0, 1]


def test_setting_the_current_mode_again_needs_no_activation(a100):
    assert pynvml.nvmlDeviceSetMigMode(_device(0), 1) == pynvml.NVML_SUCCESS


def test_disabling_mig_with_gpu_instances_present_is_in_use(a100):
    pynvml.nvmlDeviceCreateGpuInstance(_device(0), 0)
    with pytest.raises(pynvml.NVMLError_InUse):
        pynvml.nvmlDeviceSetMigMode(_device(0), pynvml.NVML_DEVICE_MIG_DISABLE)


@pytest.mark.parametrize("model", ["L40S", "T4"])
def test_gpus_without_mig_answer_not_supported(tmp_path, model):
    install(new_host(tmp_path, model))
    with initialized():
        device = _device()
        name = catalog.find_model(model).nvml_names[0]
        assert pynvml.nvmlDeviceGetName(device) == name
        for call in (
            lambda: pynvml.nvmlDeviceGetMigMode(device),
            lambda: pynvml.nvmlDeviceSetMigMode(device, 1),
            lambda: pynvml.nvmlDeviceGetGpuInstanceProfileInfo(device, 0),
            lambda: pynvml.nvmlDeviceCreateGpuInstance(device, 19),
            lambda: pynvml.nvmlDeviceGetMaxMigDeviceCount(device),
        ):
            with pytest.raises(pynvml.NVMLError_NotSupported):
                call()


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
    too_small = (pynvml.c_nvmlGpuInstancePlacement_t * 2)()
    with pytest.raises(pynvml.NVMLError_InsufficientSize):
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(
            _device(0), 14, too_small, ctypes.byref(ctypes.c_uint(3))
        )


# -- GI creation ---------------------------------------------------------------------------


def test_gpu_instances_are_created_at_the_exact_placement(a100):
    device = _device(0)
    three_g = _at(device, 9, 4, 4)
    two_g = _at(device, 14, 0, 2)
    assert _placement(three_g) == (9, 4, 4)
    assert _placement(two_g) == (14, 0, 2)
    # GI ids follow the placement, as on real GPUs: 3g at 4 is 2, 2g at 0 is 3.
    assert [pynvml.nvmlGpuInstanceGetInfo(g).id for g in (three_g, two_g)] == [2, 3]
    assert (
        pynvml.nvmlGpuInstanceGetInfo(
            pynvml.nvmlDeviceGetGpuInstanceById(device, 2)
        ).placement.start
        == 4
    )
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetGpuInstanceById(device, 1)


def test_create_without_placement_takes_the_highest_free_start(a100):
    device = _device(0)
    first, second = (pynvml.nvmlDeviceCreateGpuInstance(device, 9) for _ in range(2))
    assert [_placement(g)[1] for g in (first, second)] == [4, 0]
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        pynvml.nvmlDeviceCreateGpuInstance(device, 9)


@pytest.mark.parametrize(
    "existing, profile_id, start, size",
    [
        ([(9, 4, 4)], 14, 4, 2),  # overlaps the 3g at 4-7
        ([(14, 2, 2)], 9, 0, 4),  # 3g at 0 would cover the 2g at 2-3
        ([], 9, 2, 4),  # 2 is not a 3g placement
        ([], 14, 6, 2),  # 2g cannot start at 6 (nvidia-smi mig -lgipp; NVIDIA MIG User Guide)
        ([], 19, 0, 2),  # right start, wrong size
        ([(20, 0, 1)], 20, 1, 1),  # +me: at most one
        ([(5, 0, 4)], 5, 0, 4),  # 4g: one placement, max 1
        ([(0, 0, 8)], 19, 0, 1),  # 7g holds every slot
    ],
)
def test_gi_creation_fails_with_insufficient_resources(a100, existing, profile_id, start, size):
    device = _device(0)
    for pid, s, z in existing:
        _at(device, pid, s, z)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        _at(device, profile_id, start, size)


def test_gi_creation_fails_without_mig_and_for_unknown_profiles(a100):
    with pytest.raises(pynvml.NVMLError_NotSupported):
        _at(_device(1), 9, 4, 4)  # MIG off on GPU 1
    with pytest.raises(pynvml.NVMLError_NotSupported):
        _at(_device(0), 99, 0, 1)  # no profile 99 on an A100
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceCreateGpuInstance(_device(0), 21)  # 21 is an A30 id
    placement = pynvml.c_nvmlGpuInstancePlacement_t(4, 4)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # struct by value, not a pointer
        pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(_device(0), 9, placement)


def test_remaining_capacity_counts_free_placements_left_count_and_compute(a100):
    device = _device(0)
    _at(device, 9, 4, 4)
    capacity = {
        pid: pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(device, pid)
        for pid in (19, 20, 15, 14, 9, 5, 0)
    }
    assert capacity == {19: 4, 20: 1, 15: 2, 14: 2, 9: 1, 5: 1, 0: 0}
    _at(device, 5, 0, 4)
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(device, 19) == 0


def test_listing_gpu_instances_by_profile_id(a100):
    device = _device(0)
    _at(device, 19, 6, 1)
    _at(device, 19, 1, 1)
    _at(device, 14, 2, 2)
    handles = (pynvml.c_nvmlGpuInstance_t * 7)()
    count = ctypes.c_uint()
    pynvml.nvmlDeviceGetGpuInstances(device, 19, handles, ctypes.byref(count))
    assert sorted(_placement(h)[1] for h in handles[: count.value]) == [1, 6]


# -- compute instances, destroy ------------------------------------------------------------


def test_full_gi_compute_instance_and_destroy_order(a100):
    device = _device(0)
    gi = _at(device, 9, 0, 4)
    shared = pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    full = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, shared
    )
    assert (full.id, full.sliceCount, full.instanceCount, full.name) == (2, 3, 1, "MIG 3g.40gb")
    one_c = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 0, shared, version=1)
    assert (one_c.sliceCount, one_c.instanceCount) == (1, 3)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE, shared
        )
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 2, 1)
    ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, full.id)
    info = pynvml.nvmlComputeInstanceGetInfo(ci)
    assert (info.id, info.profileId, info.placement.start, info.placement.size) == (0, 2, 0, 3)
    assert pynvml.nvmlGpuInstanceGetInfo(info.gpuInstance).id == 1
    with pytest.raises(pynvml.NVMLError_InsufficientResources):  # the GI is full
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)
    with pytest.raises(pynvml.NVMLError_InUse):
        pynvml.nvmlGpuInstanceDestroy(gi)
    pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # the handle died with the GI
        pynvml.nvmlGpuInstanceGetInfo(gi)


def test_mig_device_handles_walk_the_compute_instances(a100):
    device = _device(0)
    for start in (0, 4):
        gi = _at(device, 9, start, 4)
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 2)
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(device) == 7
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(device, 1)
    assert pynvml.nvmlDeviceIsMigDeviceHandle(mig).value == 1
    assert pynvml.nvmlDeviceIsMigDeviceHandle(device).value == 0
    assert (pynvml.nvmlDeviceGetGpuInstanceId(mig), pynvml.nvmlDeviceGetComputeInstanceId(mig)) == (
        2,
        0,
    )
    parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
    assert pynvml.nvmlDeviceGetIndex(parent) == 0
    assert pynvml.nvmlDeviceGetName(mig) == "NVIDIA A100-SXM4-80GB MIG 3g.40gb"
    assert pynvml.nvmlDeviceGetUUID(mig).startswith("MIG-")
    assert pynvml.nvmlDeviceGetMemoryInfo(mig).total == 40192 * 1024 * 1024
    assert (
        pynvml.nvmlDeviceGetIndex(
            pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
                pynvml.nvmlDeviceGetHandleByUUID(pynvml.nvmlDeviceGetUUID(mig))
            )
        )
        == 0
    )
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(device, 2)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceId(device)


# -- reboot --------------------------------------------------------------------------------


def test_reboot_clears_instances_and_keeps_the_mig_mode(a100):
    path, _ = a100
    gi = _at(_device(0), 9, 4, 4)
    pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 2)
    pynvml.nvmlDeviceSetMigMode(_device(1), 1)
    with edit(path) as host:
        host["gpus"][1]["busy"] = True
        state.reboot(host)
    assert pynvml.nvmlDeviceGetMigMode(_device(0)) == [1, 1]
    assert pynvml.nvmlDeviceGetMigMode(_device(1)) == [1, 1]  # pending became current
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(_device(0), 0) == 1
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpuInstanceGetInfo(gi)
    assert state.load(path)["gpus"][1]["busy"] is False


# -- faults --------------------------------------------------------------------------------


def test_unloaded_driver_fails_init_with_driver_not_loaded(tmp_path):
    path = new_host(tmp_path)
    with edit(path) as host:
        host["driver"]["loaded"] = False
    install(path)
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()


def test_missing_state_file_is_library_not_found(tmp_path):
    install(str(tmp_path / "absent.json"))
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        pynvml.nvmlInit()


def test_fail_after_counts_successes_across_library_instances(tmp_path):
    path = new_host(tmp_path, mig=[0])
    with edit(path) as host:
        host["faults"]["fail_after"] = {
            "function": "nvmlDeviceCreateGpuInstanceWithPlacement",
            "successes": 2,
            "error": "NVML_ERROR_UNKNOWN",
        }
    install(path)
    with initialized():
        _at(_device(), 19, 0, 1)
    install(path)  # another process, same driver state
    with initialized():
        _at(_device(), 19, 1, 1)
        with pytest.raises(pynvml.NVMLError_Unknown):
            _at(_device(), 19, 2, 1)
        pynvml.nvmlDeviceCreateGpuInstance(_device(), 19)  # other functions still work
    assert state.load(path)["faults"]["fail_after"]["succeeded"] == 2


# -- several processes ---------------------------------------------------------------------


def _churn(path: str, index: int, rounds: int) -> None:
    install(path)
    pynvml.nvmlInit()
    device = pynvml.nvmlDeviceGetHandleByIndex(index)
    for _ in range(rounds):
        created = [_at(device, 19, start, 1) for start in range(7)]
        for gi in created:
            pynvml.nvmlGpuInstanceDestroy(gi)
    for start in range(7):
        _at(device, 19, start, 1)
    pynvml.nvmlShutdown()


def test_concurrent_processes_neither_lose_updates_nor_corrupt_the_file(tmp_path):
    path = new_host(tmp_path, count=2, mig=[0, 1])
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_churn, args=(path, index, 3)) for index in (0, 1)]
    for worker in workers:
        worker.start()
    for _ in range(50):  # a reader meanwhile always sees a whole document
        assert state.load(path)["schema"] == SIM_SCHEMA
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    with open(path) as f:
        host = json.load(f)
    assert [sorted(gi["start"] for gi in gpu["gpu_instances"]) for gpu in host["gpus"]] == [
        list(range(7))
    ] * 2


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
