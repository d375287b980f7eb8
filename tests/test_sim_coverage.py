"""Every C function the simulated driver offers is a real NVML name pynvml calls, and reached."""

from __future__ import annotations

import ctypes
import inspect
import re

import pynvml
import pytest
from gpuprov_lab.sim import install
from gpuprov_lab.sim.nvml import FUNCTIONS
from simulated import initialized, isolate_pynvml, new_host


@pytest.fixture(autouse=True)
def _isolated(monkeypatch):
    isolate_pynvml(monkeypatch)


def test_every_simulated_function_is_one_pynvml_looks_up_by_that_name():
    looked_up = set(re.findall(r'_nvmlGetFunctionPointer\("(\w+)"\)', inspect.getsource(pynvml)))
    assert FUNCTIONS <= looked_up, sorted(FUNCTIONS - looked_up)


def test_each_wrapper_reaches_its_simulated_function(tmp_path):
    lib = install(new_host(tmp_path, "H100-80GB", mig=[0]))
    with initialized():
        pynvml.nvmlSystemGetDriverVersion()
        pynvml.nvmlSystemGetNVMLVersion()
        pynvml.nvmlSystemGetCudaDriverVersion()
        pynvml.nvmlSystemGetCudaDriverVersion_v2()
        device = pynvml.nvmlDeviceGetHandleByIndex(pynvml.nvmlDeviceGetCount() - 1)
        pynvml.nvmlDeviceGetHandleByUUID(pynvml.nvmlDeviceGetUUID(device))
        pynvml.nvmlDeviceGetName(device)
        pynvml.nvmlDeviceGetIndex(device)
        pynvml.nvmlDeviceGetMinorNumber(device)
        pynvml.nvmlDeviceGetTopologyCommonAncestor(device, device)
        pynvml.nvmlDeviceGetCudaComputeCapability(device)
        pynvml.nvmlDeviceGetPciInfo(device)
        pynvml.nvmlDeviceGetMemoryInfo(device)
        pynvml.nvmlDeviceGetMemoryInfo(device, version=pynvml.nvmlMemory_v2)
        pynvml.nvmlDeviceGetMigMode(device)
        pynvml.nvmlDeviceSetMigMode(device, pynvml.NVML_DEVICE_MIG_ENABLE)
        pynvml.nvmlDeviceGetGpuInstanceProfileInfo(device, 0, version=1)
        pynvml.nvmlDeviceGetGpuInstanceProfileInfo(device, 0)
        pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(device, 15)
        count = ctypes.c_uint()
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(device, 15, None, ctypes.byref(count))
        pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(device, 15)
        placement = pynvml.c_nvmlGpuInstancePlacement_t(6, 2)
        gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(device, 15, ctypes.byref(placement))
        other = pynvml.nvmlDeviceCreateGpuInstance(device, 19)
        handles = (pynvml.c_nvmlGpuInstance_t * 7)()
        pynvml.nvmlDeviceGetGpuInstances(device, 19, handles, ctypes.byref(count))
        gi_id = pynvml.nvmlGpuInstanceGetInfo(gi).id
        pynvml.nvmlDeviceGetGpuInstanceById(device, gi_id)
        shared = pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
        pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 0, shared, version=1)
        profile = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 0, shared)
        ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, profile.id)
        cis = (pynvml.c_nvmlComputeInstance_t * 1)()
        pynvml.nvmlGpuInstanceGetComputeInstances(gi, profile.id, cis, ctypes.byref(count))
        pynvml.nvmlComputeInstanceGetInfo(ci)
        pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, pynvml.nvmlComputeInstanceGetInfo(ci).id)
        pynvml.nvmlDeviceGetMaxMigDeviceCount(device)
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(device, 0)
        pynvml.nvmlDeviceIsMigDeviceHandle(mig)
        pynvml.nvmlDeviceGetGpuInstanceId(mig)
        pynvml.nvmlDeviceGetComputeInstanceId(mig)
        pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        pynvml.nvmlDeviceGetAttributes(mig)
        pynvml.nvmlComputeInstanceDestroy(ci)
        pynvml.nvmlGpuInstanceDestroy(other)
        assert (
            pynvml.nvmlErrorString(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
            == "Insufficient Resources"
        )
        pynvml.nvmlDeviceGetTotalEccErrors(device, 1, 0)
        pynvml.nvmlDeviceGetMemoryErrorCounter(device, 1, 1, pynvml.NVML_MEMORY_LOCATION_DRAM)
        for not_here in (  # reached, but NOT_SUPPORTED: MIG instances exist; an H100 remaps rows
            lambda: pynvml.nvmlDeviceGetRemappedRows(device),
            lambda: pynvml.nvmlDeviceGetRetiredPagesPendingStatus(device),
            lambda: pynvml.nvmlDeviceGetRetiredPages(device, 0),
            lambda: pynvml.nvmlDeviceGetRetiredPages_v2(device, 0),
        ):
            with pytest.raises(pynvml.NVMLError_NotSupported):
                not_here()
    assert set(lib.calls) == FUNCTIONS, sorted(FUNCTIONS - set(lib.calls))
