"""The simulated C driver's rules through pynvml, loaded by pynvml's own loader as on a real host.

What tests/test_sim_nvml.py proves of the Python simulator, proven of ``libnvidia-ml.so.1``: MIG
mode pending until a reset, GPU instances at exact placements with placement-derived ids,
capacity, compute instances, destruction, reboot and reset through the library's gpuprovSim*
API, faults whose budget spans processes, concurrent writers. Then the write side call for call:
the same scripted changes through the Python simulator and through the C library give the same
answers and the same state file. Then large counters: never wrapped to 0.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import pynvml
import pytest
from gpuprov_lab.sim import state
from gpuprov_lab.sim.contract import SIM_ENV
from gpuprov_lab.sim.libnvml import build
from simulated import Hardware, SimError, edit, library, new_host, nvml


@pytest.fixture
def a100(tmp_path):
    """Two A100-80GB, GPU 0 with MIG on; pynvml initialized against them through the C library."""
    path = new_host(tmp_path, "A100-80GB", 2, mig=[0])
    with nvml(path):
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


def test_pynvml_loads_the_simulated_library_itself(a100):
    assert isinstance(pynvml.nvmlLib, ctypes.CDLL)
    assert pynvml.nvmlLib._name == build.LIBRARY  # its own CDLL("libnvidia-ml.so.1")
    assert hasattr(pynvml.nvmlLib, "gpuprovSimLastError")
    assert pynvml.nvmlDeviceGetCount() == 2
    assert pynvml.nvmlDeviceGetName(_device(1)) == "NVIDIA A100-SXM4-80GB"


# -- MIG mode ------------------------------------------------------------------------------


def test_mig_mode_change_stays_pending_until_a_gpu_reset(a100):
    device = _device(1)
    assert pynvml.nvmlDeviceGetMigMode(device) == [0, 0]
    status = pynvml.nvmlDeviceSetMigMode(device, pynvml.NVML_DEVICE_MIG_ENABLE)
    assert status == pynvml.NVML_ERROR_RESET_REQUIRED
    assert pynvml.nvmlDeviceGetMigMode(device) == [0, 1]
    with pytest.raises(pynvml.NVMLError_NotSupported):  # MIG is not *currently* enabled
        pynvml.nvmlDeviceCreateGpuInstance(device, 19)
    assert Hardware(a100).reset(1)
    assert pynvml.nvmlDeviceGetMigMode(device) == [1, 1]
    assert pynvml.nvmlDeviceGetMigMode(_device(0)) == [1, 1]


def test_mig_mode_on_a_busy_gpu_reports_in_use_and_the_reset_is_refused(a100):
    hardware = Hardware(a100)
    hardware.busy(1)
    assert pynvml.nvmlDeviceSetMigMode(_device(1), 1) == pynvml.NVML_ERROR_IN_USE
    assert not hardware.reset(1)
    assert library().gpuprovSimLastError() == b"In use by another client"
    assert pynvml.nvmlDeviceGetMigMode(_device(1)) == [0, 1]
    hardware.busy(1, False)
    hardware.hold(1, "nvidia-persistenced.service")  # without systemd a listed unit holds it
    assert not hardware.reset(1)
    hardware.hold(1, None)
    assert hardware.reset(1)
    assert pynvml.nvmlDeviceGetMigMode(_device(1)) == [1, 1]


def test_setting_the_current_mode_again_needs_no_activation(a100):
    assert pynvml.nvmlDeviceSetMigMode(_device(0), 1) == pynvml.NVML_SUCCESS


def test_disabling_mig_with_gpu_instances_present_is_in_use(a100):
    pynvml.nvmlDeviceCreateGpuInstance(_device(0), 0)
    with pytest.raises(pynvml.NVMLError_InUse):
        pynvml.nvmlDeviceSetMigMode(_device(0), pynvml.NVML_DEVICE_MIG_DISABLE)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceSetMigMode(_device(1), 2)


@pytest.mark.parametrize("model", ["L40S", "T4"])
def test_gpus_without_mig_answer_not_supported(tmp_path, model):
    with nvml(new_host(tmp_path, model)):
        device = _device()
        for call in (
            lambda: pynvml.nvmlDeviceGetMigMode(device),
            lambda: pynvml.nvmlDeviceSetMigMode(device, 1),
            lambda: pynvml.nvmlDeviceCreateGpuInstance(device, 19),
            lambda: pynvml.nvmlDeviceGetMaxMigDeviceCount(device),
        ):
            with pytest.raises(pynvml.NVMLError_NotSupported):
                call()


# -- GPU instances -------------------------------------------------------------------------


def test_gpu_instances_are_created_at_the_exact_placement(a100):
    device = _device(0)
    three_g = _at(device, 9, 4, 4)
    two_g = _at(device, 14, 0, 2)
    assert _placement(three_g) == (9, 4, 4)
    assert _placement(two_g) == (14, 0, 2)
    # GI ids follow the placement, as on real GPUs: 3g at 4 is 2, 2g at 0 is 3.
    assert [pynvml.nvmlGpuInstanceGetInfo(g).id for g in (three_g, two_g)] == [2, 3]
    found = pynvml.nvmlDeviceGetGpuInstanceById(device, 2)
    assert pynvml.nvmlGpuInstanceGetInfo(found).placement.start == 4
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetGpuInstanceById(device, 1)


@pytest.mark.parametrize(
    "placements, ids",
    [
        ([(0, 0, 8)], [0]),
        ([(9, 0, 4), (9, 4, 4)], [1, 2]),
        ([(14, 0, 2), (14, 2, 2), (14, 4, 2)], [3, 4, 5]),
        ([(19, k, 1) for k in range(7)], [7, 8, 9, 10, 11, 12, 13]),
    ],
)
def test_gpu_instance_ids_are_the_placements_node_in_the_slot_tree(a100, placements, ids):
    device = _device(0)
    created = [_at(device, *where) for where in placements]
    assert [pynvml.nvmlGpuInstanceGetInfo(g).id for g in created] == ids


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
        ([(9, 0, 4), (9, 4, 4)], 19, 3, 1),  # 6 of 7 compute slices in use, slot 3 is the 3g's
    ],
)
def test_gi_creation_fails_with_insufficient_resources(a100, existing, profile_id, start, size):
    device = _device(0)
    for pid, s, z in existing:
        _at(device, pid, s, z)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        _at(device, profile_id, start, size)


def test_gi_creation_fails_without_mig_for_unknown_profiles_and_without_a_placement(a100):
    with pytest.raises(pynvml.NVMLError_NotSupported):
        _at(_device(1), 9, 4, 4)  # MIG off on GPU 1
    with pytest.raises(pynvml.NVMLError_NotSupported):
        _at(_device(0), 99, 0, 1)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceCreateGpuInstance(_device(0), 21)  # 21 is an A30 id
    create = pynvml._nvmlGetFunctionPointer("nvmlDeviceCreateGpuInstanceWithPlacement")
    handle = pynvml.c_nvmlGpuInstance_t()
    assert create(_device(0), 9, None, ctypes.byref(handle)) == pynvml.NVML_ERROR_INVALID_ARGUMENT


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


def test_a30_numbers_its_instances_in_a_tree_of_four_slots(tmp_path):
    with nvml(new_host(tmp_path, "A30-24GB", 1, mig=[0])):
        device = _device(0)
        ids = [pynvml.nvmlGpuInstanceGetInfo(_at(device, 14, k, 1)).id for k in (0, 3)]
        assert ids == [3, 6]  # slots // size - 1 + start // size over 4 slots


# -- compute instances, destroy ------------------------------------------------------------


def test_full_gi_compute_instance_and_destroy_order(a100):
    device = _device(0)
    gi = _at(device, 9, 0, 4)
    shared = pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    full = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, shared
    )
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


def test_split_compute_instances_take_the_lowest_free_slices_and_ids(a100):
    gi = _at(_device(0), 9, 4, 4)
    made = [pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0) for _ in range(3)]
    infos = [pynvml.nvmlComputeInstanceGetInfo(ci) for ci in made]
    assert [(i.id, i.placement.start, i.placement.size) for i in infos] == [
        (0, 0, 1),
        (1, 1, 1),
        (2, 2, 1),
    ]
    pynvml.nvmlComputeInstanceDestroy(made[1])
    again = pynvml.nvmlComputeInstanceGetInfo(pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0))
    assert (again.id, again.placement.start) == (1, 1)
    names = sorted(
        pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(_device(0), n))
        for n in range(3)
    )
    assert names == ["NVIDIA A100-SXM4-80GB MIG 1c.3g.40gb"] * 3


def test_mig_device_handles_walk_the_compute_instances(a100):
    device = _device(0)
    for start in (0, 4):
        gi = _at(device, 9, start, 4)
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 2)
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(device, 1)
    assert (pynvml.nvmlDeviceGetGpuInstanceId(mig), pynvml.nvmlDeviceGetComputeInstanceId(mig)) == (
        2,
        0,
    )
    uuid = pynvml.nvmlDeviceGetUUID(mig)
    parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
        pynvml.nvmlDeviceGetHandleByUUID(uuid)
    )
    assert pynvml.nvmlDeviceGetIndex(parent) == 0
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(device, 2)


# -- reboot and faults ---------------------------------------------------------------------


def test_reboot_clears_instances_and_keeps_the_mig_mode(a100):
    gi = _at(_device(0), 9, 4, 4)
    pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 2)
    pynvml.nvmlDeviceSetMigMode(_device(1), 1)
    hardware = Hardware(a100)
    hardware.busy(1)
    hardware.boot()
    assert pynvml.nvmlDeviceGetMigMode(_device(0)) == [1, 1]
    assert pynvml.nvmlDeviceGetMigMode(_device(1)) == [1, 1]  # pending became current
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(_device(0), 0) == 1
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpuInstanceGetInfo(gi)
    assert state.load(a100)["gpus"][1]["busy"] is False


def test_unloaded_driver_and_missing_state_fail_init(tmp_path, monkeypatch):
    path = new_host(tmp_path)
    Hardware(path).driver(loaded=False)
    library()
    monkeypatch.setenv(SIM_ENV, path)
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()
    monkeypatch.setenv(SIM_ENV, str(tmp_path / "absent.json"))
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        pynvml.nvmlInit()


CREATE_AT = """
import ctypes, sys
import pynvml
library, start = sys.argv[1], int(sys.argv[2])
lib = ctypes.CDLL(library)
device, gi = ctypes.c_void_p(), ctypes.c_void_p()
placement = pynvml.c_nvmlGpuInstancePlacement_t(start, 1)
assert lib.nvmlInit_v2() == 0
assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(device)) == 0
print(lib.nvmlDeviceCreateGpuInstanceWithPlacement(device, 19, ctypes.byref(placement),
                                                   ctypes.byref(gi)))
lib.nvmlShutdown()
"""


def test_fail_after_counts_successes_across_processes(tmp_path):
    path = new_host(tmp_path, mig=[0])
    Hardware(path).fault("nvmlDeviceCreateGpuInstanceWithPlacement", 2, "NVML_ERROR_UNKNOWN")
    codes = []
    for start in range(3):  # one process each, one GI each
        out = subprocess.run(
            [sys.executable, "-c", CREATE_AT, str(build.library()), str(start)],
            env={**os.environ, SIM_ENV: path},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        codes.append(int(out.stdout))
    assert codes == [0, 0, pynvml.NVML_ERROR_UNKNOWN]
    with nvml(path):
        pynvml.nvmlDeviceCreateGpuInstance(_device(), 19)  # other functions still work
    assert state.load(path)["faults"]["fail_after"]["succeeded"] == 2


def test_a_fault_on_a_read_counts_and_then_fires(tmp_path):
    path = new_host(tmp_path)
    Hardware(path).fault("nvmlDeviceGetName", 1, "NVML_ERROR_GPU_IS_LOST")
    with nvml(path):
        assert pynvml.nvmlDeviceGetName(_device()) == "NVIDIA A100-SXM4-80GB"
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            pynvml.nvmlDeviceGetName(_device())
        assert pynvml.nvmlDeviceGetUUID(_device()).startswith("GPU-")
    assert state.load(path)["faults"]["fail_after"]["succeeded"] == 1


@pytest.mark.parametrize(
    "function, error, message",
    [
        ("nvmlDeviceGetFoo", None, "the simulated driver has no function 'nvmlDeviceGetFoo'"),
        ("nvmlDeviceGetTemperature", None, "no function 'nvmlDeviceGetTemperature'"),
        ("nvmlDeviceGetName", "OOPS", "unknown NVML error 'OOPS'"),
    ],
)
def test_a_fault_the_driver_cannot_raise_is_refused(tmp_path, function, error, message):
    path = new_host(tmp_path)
    before = state.load(path)
    with pytest.raises(SimError, match=message):
        Hardware(path).fault(function, 1, error)
    assert state.load(path) == before


# -- several processes, both kinds of writer -----------------------------------------------


CHURN = """
import ctypes, sys
import pynvml

path, index, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pynvml.nvmlInit()  # the library on LD_LIBRARY_PATH, by pynvml's own loader
device = pynvml.nvmlDeviceGetHandleByIndex(index)

def at(start):
    placement = pynvml.c_nvmlGpuInstancePlacement_t(start, 1)
    return pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(device, 19, ctypes.byref(placement))

for _ in range(rounds):
    for gi in [at(start) for start in range(7)]:
        pynvml.nvmlGpuInstanceDestroy(gi)
for start in range(7):
    at(start)
pynvml.nvmlShutdown()
print(type(pynvml.nvmlLib).__name__)
"""


def test_concurrent_writers_neither_lose_updates_nor_corrupt_the_file(tmp_path):
    """Four processes change one state file at once through the library; a reader meanwhile."""
    path = new_host(tmp_path, count=4, mig=[0, 1, 2, 3])
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", CHURN, path, str(index), "3"],
            env={**os.environ, SIM_ENV: path},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for index in range(4)
    ]
    try:
        for _ in range(50):  # a reader meanwhile always sees a whole document
            assert state.load(path)["schema"] == state.SIM_SCHEMA
        outs = [worker.communicate(timeout=300) for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    assert [worker.returncode for worker in workers] == [0] * 4, [err for _, err in outs]
    assert [out.strip() for out, _ in outs] == ["CDLL"] * 4
    host = state.load(path)
    assert [sorted(gi["start"] for gi in gpu["gpu_instances"]) for gpu in host["gpus"]] == [
        list(range(7))
    ] * 4


# -- counters beyond NVML's types ----------------------------------------------------------


def test_large_counters_are_clamped_never_wrapped_and_kept_exact_in_the_file(tmp_path):
    path = new_host(tmp_path, "A100-80GB", 2, mig=[1])
    with edit(path) as host:
        health = host["gpus"][0]["health"]
        health["ecc"]["uncorrected"] = {"volatile": 2**64, "aggregate": 2**64 + 5}
        health["ecc"]["corrected"] = {"volatile": 2**64 - 1, "aggregate": 2**53 + 1}
        health["remapped_rows"].update(corrected=2**32, uncorrected=2**32 - 1)
    with nvml(path):
        device = _device(0)
        ecc = pynvml.nvmlDeviceGetTotalEccErrors
        assert ecc(device, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC) == (
            2**64 - 1
        )
        assert ecc(device, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC) == (
            2**64 - 1
        )
        assert ecc(device, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_AGGREGATE_ECC) == (
            2**53 + 1
        )
        assert pynvml.nvmlDeviceGetRemappedRows(device) == (2**32 - 1, 2**32 - 1, 0, 0)
        # A change elsewhere rewrites the whole file: the counts stay as they were written.
        pynvml.nvmlDeviceCreateGpuInstance(_device(1), 0)
    with open(path) as f:  # as written: more than the lab's own reader accepts
        health = json.load(f)["gpus"][0]["health"]
    assert health["ecc"]["uncorrected"] == {"volatile": 2**64, "aggregate": 2**64 + 5}
    assert health["remapped_rows"]["corrected"] == 2**32
    Hardware(path).boot()  # a reset clears volatile counts: now they are the library's own
    with open(path) as f:
        assert json.load(f)["gpus"][0]["health"]["ecc"]["uncorrected"]["volatile"] == 0


def test_a_malformed_state_is_unknown_to_nvml_and_one_line_to_the_admin_api(tmp_path, monkeypatch):
    path = new_host(tmp_path)
    with edit(path) as host:
        host["gpus"][0]["mig_pending"] = "yes"
    with pytest.raises(SimError, match=r"gpus\[0\] must have index .*mig_pending \(true\|false\)"):
        Hardware(path).boot()
    library()
    monkeypatch.setenv(SIM_ENV, path)
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlInit()
