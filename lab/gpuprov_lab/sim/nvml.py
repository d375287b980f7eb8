"""A simulated ``libnvidia-ml``: the object pynvml calls instead of the C library.

pynvml looks every C function up with ``getattr(pynvml.nvmlLib, "nvmlDeviceGetName")`` and calls
it with ctypes arguments (``byref`` out-parameters, ``c_char`` buffers, its own structs), then turns
the returned ``nvmlReturn_t`` into an exception. ``SimulatedNvml`` answers those lookups, so the
real wrapper code runs unchanged above it. Each call reads the state file (``state.py``) under its
lock and writes it back when the call changed something, so several processes share one "GPU".

Handles are opaque pointer values that encode what they point at (GPU index, GI id, CI id); they
stay valid across processes and become invalid when the instance is destroyed.

>>> lib = SimulatedNvml("/var/lib/gpuprov-sim/gpus.json")   # doctest: +SKIP
>>> pynvml.nvmlLib = lib  # what ``gpuprov_lab.sim.install`` does  # doctest: +SKIP
"""

from __future__ import annotations

import copy
import ctypes
import os
import uuid
from collections import Counter
from typing import Any

import pynvml

from gpuprov.core import catalog
from gpuprov_lab.sim import state as sim_state

# Handle layout, MIG UUID namespace, CI slice table and error strings are shared with the
# simulated C library (lab/gpuprov_lab/sim/libnvml), which is generated from these names.
HANDLE_TAG = 0x7E57
KIND_DEVICE, KIND_GPU_INSTANCE, KIND_COMPUTE_INSTANCE, KIND_MIG_DEVICE = 1, 2, 3, 4
_CARG = type(ctypes.byref(ctypes.c_int()))
MIG_UUID_NAMESPACE = uuid.UUID("0b6f7c1e-2d43-4a8e-b1f5-6d6967646576")

# Compute-instance profile constant -> compute slices it spans (pynvml
# NVML_COMPUTE_INSTANCE_PROFILE_*). The CI profile id NVML reports equals the constant for these:
# `-cci` prints "MIG 3g.20gb (ID  2)" for the full CI of a 3g GI and "(ID  0)" for 1c (public
# nvidia-smi MIG notes; rapidsai/dask-cuda#583).
CI_SLICES = {
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE: 1,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE: 2,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE: 3,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE: 4,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE: 7,
}

# nvmlErrorString for the codes pynvml has no text for. "In use by another client" and
# "Insufficient Resources" are what nvidia-smi and go-nvml print (mig-parted#181, #29).
_ERROR_STRINGS = {
    pynvml.NVML_ERROR_IN_USE: "In use by another client",
    pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES: "Insufficient Resources",
    pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH: "Argument version mismatch",
    pynvml.NVML_ERROR_INVALID_STATE: "Invalid state",
}


class _Fail(Exception):
    """A simulated call ends with this NVML return code."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


class SimulatedNvml:
    """The ``pynvml.nvmlLib`` stand-in for the simulated driver in ``path``.

    ``calls`` counts the C functions pynvml reached through this object, by name.
    """

    def __init__(self, path: str):
        self.path = path
        self.calls: Counter[str] = Counter()
        self._initialized = 0
        self._functions: dict[str, _Function] = {}

    def __getattr__(self, name: str) -> _Function:
        if name.startswith("_") or name not in FUNCTIONS:
            raise AttributeError(name)
        if name not in self._functions:
            self._functions[name] = _Function(self, name)
        return self._functions[name]

    def _call(self, name: str, args: tuple) -> int:
        if name == "nvmlShutdown":
            if not self._initialized:
                return pynvml.NVML_ERROR_UNINITIALIZED
            self._initialized -= 1
            return pynvml.NVML_SUCCESS
        if name != "nvmlInitWithFlags" and not self._initialized:
            return pynvml.NVML_ERROR_UNINITIALIZED
        if name == "nvmlInitWithFlags" and not os.path.exists(self.path):
            # No state file is no driver installed at all: the library itself is missing.
            return pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
        try:
            with sim_state.transaction(self.path) as current:
                return _Driver(current, self).run(name, args)
        except sim_state.StateError:
            return pynvml.NVML_ERROR_UNKNOWN


class _Function:
    """One C function of the simulated library (pynvml may set ``restype`` on it)."""

    def __init__(self, lib: SimulatedNvml, name: str):
        self.lib = lib
        self.name = name
        self.restype: Any = ctypes.c_int
        self.argtypes: Any = None

    def __call__(self, *args: Any) -> Any:
        self.lib.calls[self.name] += 1
        if self.name == "nvmlErrorString":
            return error_string(_int(args[0])).encode()
        return self.lib._call(self.name, args)


def error_string(code: int) -> str:
    known = pynvml.NVMLError._errcode_to_string.get(code) or _ERROR_STRINGS.get(code)
    return known or f"Unknown Error {code}"


class _Driver:
    """The rules of one call against one loaded state; methods are named after C functions."""

    def __init__(self, current: sim_state.State, lib: SimulatedNvml):
        self.state = current
        self.lib = lib

    def run(self, name: str, args: tuple) -> int:
        fault = self.state["faults"].get("fail_after")
        if fault and fault.get("function") == name:
            if fault.get("succeeded", 0) >= fault["successes"]:
                return getattr(pynvml, fault.get("error") or "NVML_ERROR_UNKNOWN")
        before = copy.deepcopy(self.state)
        try:
            getattr(self, name)(*args)
        except _Fail as failure:
            self.state.clear()
            self.state.update(before)
            return failure.code
        if fault and fault.get("function") == name:
            fault["succeeded"] = fault.get("succeeded", 0) + 1
        return pynvml.NVML_SUCCESS

    # -- lookups ---------------------------------------------------------------------------

    def _gpu(self, handle: Any, kinds: tuple[int, ...] = (KIND_DEVICE,)) -> dict[str, Any]:
        kind, index, _, _ = _decode(handle)
        if kind not in kinds or index >= len(self.state["gpus"]):
            raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.state["gpus"][index]

    def _model(self, gpu: dict[str, Any]) -> catalog.GpuModel:
        model = catalog.find_model(gpu["model"])
        if model is None:
            raise _Fail(pynvml.NVML_ERROR_UNKNOWN)
        return model

    def _mig_model(self, gpu: dict[str, Any], enabled: bool) -> catalog.GpuModel:
        """The MIG-capable model of ``gpu``; with ``enabled``, MIG must be on now."""
        model = self._model(gpu)
        if not model.mig_capable or (enabled and not gpu["mig_current"]):
            raise _Fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return model

    def _profile_by_id(self, model: catalog.GpuModel, profile_id: int) -> catalog.MigProfile:
        # nvml.h: NOT_SUPPORTED "if profile_id isn't supported" (create, list, capacity).
        profile = model.profile_by_id(profile_id)
        if profile is None:
            raise _Fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return profile

    def _gpu_instance(self, handle: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        kind, index, gi_id, _ = _decode(handle)
        if kind != KIND_GPU_INSTANCE:
            raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._find_gi(index, gi_id)

    def _find_gi(self, index: int, gi_id: int) -> tuple[dict[str, Any], dict[str, Any]]:
        gpus = self.state["gpus"]
        if index < len(gpus) and gpus[index]["mig_current"]:
            for gi in gpus[index]["gpu_instances"]:
                if gi["id"] == gi_id:
                    return gpus[index], gi
        raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def _compute_instance(
        self,
        handle: Any,
        kind: int = KIND_COMPUTE_INSTANCE,
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        found_kind, index, gi_id, ci_id = _decode(handle)
        if found_kind != kind:
            raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu, gi = self._find_gi(index, gi_id)
        for ci in gi["compute_instances"]:
            if ci["id"] == ci_id:
                return gpu, gi, ci
        raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def _gi_profile(self, gpu: dict[str, Any], gi: dict[str, Any]) -> catalog.MigProfile:
        return self._profile_by_id(self._model(gpu), gi["profile_id"])

    def _mig_devices(self, gpu: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        return [
            (gi, ci)
            for gi in sorted(gpu["gpu_instances"], key=lambda g: g["id"])
            for ci in sorted(gi["compute_instances"], key=lambda c: c["id"])
        ]

    # -- system ----------------------------------------------------------------------------

    def nvmlInitWithFlags(self, flags: Any) -> None:
        if not self.state["driver"].get("loaded", True):
            raise _Fail(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        self.lib._initialized += 1

    def nvmlSystemGetDriverVersion(self, buffer: Any, length: Any) -> None:
        _write_string(buffer, length, self.state["driver"]["version"])

    def nvmlSystemGetNVMLVersion(self, buffer: Any, length: Any) -> None:
        _write_string(buffer, length, nvml_version(self.state["driver"]["version"]))

    def nvmlDeviceGetCount_v2(self, count: Any) -> None:
        _store(count, len(self.state["gpus"]))

    def nvmlSystemGetCudaDriverVersion(self, version: Any) -> None:
        _store(version, cuda_driver_version(self.state["driver"]["version"]))

    def nvmlSystemGetCudaDriverVersion_v2(self, version: Any) -> None:
        _store(version, cuda_driver_version(self.state["driver"]["version"]))

    # -- devices ---------------------------------------------------------------------------

    def nvmlDeviceGetHandleByIndex_v2(self, index: Any, device: Any) -> None:
        position = _int(index)
        if position >= len(self.state["gpus"]):
            raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        _store_handle(device, _encode(KIND_DEVICE, position))

    def nvmlDeviceGetHandleByUUID(self, wanted: Any, device: Any) -> None:
        text = (wanted.value if isinstance(wanted, ctypes.c_char_p) else wanted) or b""
        text = text.decode() if isinstance(text, bytes) else str(text)
        for gpu in self.state["gpus"]:
            if gpu["uuid"] == text:
                return _store_handle(device, _encode(KIND_DEVICE, gpu["index"]))
            for gi, ci in self._mig_devices(gpu) if gpu["mig_current"] else []:
                if _mig_uuid(gpu, gi, ci) == text:
                    return _store_handle(
                        device, _encode(KIND_MIG_DEVICE, gpu["index"], gi["id"], ci["id"])
                    )
        raise _Fail(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetName(self, device: Any, buffer: Any, length: Any) -> None:
        gpu = self._gpu(device, (KIND_DEVICE, KIND_MIG_DEVICE))
        name = self._model(gpu).nvml_names[0]
        if _decode(device)[0] == KIND_MIG_DEVICE:
            _, gi, ci = self._compute_instance(device, KIND_MIG_DEVICE)
            name = f"{name} {_ci_name(self._gi_profile(gpu, gi), ci['profile_id'])}"
        _write_string(buffer, length, name)

    def nvmlDeviceGetUUID(self, device: Any, buffer: Any, length: Any) -> None:
        gpu = self._gpu(device, (KIND_DEVICE, KIND_MIG_DEVICE))
        text = gpu["uuid"]
        if _decode(device)[0] == KIND_MIG_DEVICE:
            _, gi, ci = self._compute_instance(device, KIND_MIG_DEVICE)
            text = _mig_uuid(gpu, gi, ci)
        _write_string(buffer, length, text)

    def nvmlDeviceGetIndex(self, device: Any, index: Any) -> None:
        _store(index, self._gpu(device)["index"])

    def nvmlDeviceGetMinorNumber(self, device: Any, minor: Any) -> None:
        # The lab's /dev/nvidia<N> nodes are numbered by index, as on a single-board host.
        _store(minor, self._gpu(device)["index"])

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: Any, device2: Any, level: Any) -> None:
        # No PCIe tree is simulated: two GPUs meet at the system level, a GPU with itself at the
        # nearest (nvml.h nvmlGpuTopologyLevel_t); the C library answers the same.
        first, second = self._gpu(device1), self._gpu(device2)
        same = first["index"] == second["index"]
        _store(level, pynvml.NVML_TOPOLOGY_INTERNAL if same else pynvml.NVML_TOPOLOGY_SYSTEM)

    def nvmlDeviceGetCudaComputeCapability(self, device: Any, major: Any, minor: Any) -> None:
        model = self._model(self._gpu(device, (KIND_DEVICE, KIND_MIG_DEVICE)))
        if model.compute_capability == (0, 0):
            raise _Fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        _store(major, model.compute_capability[0])
        _store(minor, model.compute_capability[1])

    def nvmlDeviceGetPciInfo_v3(self, device: Any, info: Any) -> None:
        gpu = self._gpu(device)
        target = _deref(info)
        if not isinstance(target, pynvml.nvmlPciInfo_t):
            raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        domain, bus, rest = gpu["pci_bus_id"].split(":")
        slot = rest.split(".")[0]
        target.busId = gpu["pci_bus_id"].encode()
        target.busIdLegacy = f"{int(domain, 16) & 0xFFFF:04x}:{bus}:{rest}".encode()
        target.domain, target.bus, target.device = int(domain, 16), int(bus, 16), int(slot, 16)
        ids = self._model(gpu).pci_device_ids
        target.pciDeviceId = int(ids[0], 16) if ids else 0
        target.pciSubSystemId = 0

    def nvmlDeviceGetMemoryInfo(self, device: Any, memory: Any) -> None:
        self._memory(device, memory, versioned=False)

    def nvmlDeviceGetMemoryInfo_v2(self, device: Any, memory: Any) -> None:
        self._memory(device, memory, versioned=True)

    def _memory(self, device: Any, memory: Any, versioned: bool) -> None:
        gpu = self._gpu(device, (KIND_DEVICE, KIND_MIG_DEVICE))
        mib = self._model(gpu).memory_mib
        if _decode(device)[0] == KIND_MIG_DEVICE:
            _, gi, _ = self._compute_instance(device, KIND_MIG_DEVICE)
            mib = self._gi_profile(gpu, gi).memory_mib
        target = _deref(memory)
        expected = pynvml.c_nvmlMemory_v2_t if versioned else pynvml.c_nvmlMemory_t
        if not isinstance(target, expected):
            raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if versioned and target.version != pynvml.nvmlMemory_v2:
            raise _Fail(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        target.total, target.free, target.used = mib << 20, mib << 20, 0

    # -- MIG mode --------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, device: Any, current: Any, pending: Any) -> None:
        gpu = self._gpu(device)
        self._mig_model(gpu, enabled=False)
        _store(current, int(gpu["mig_current"]))
        _store(pending, int(gpu["mig_pending"]))

    def nvmlDeviceSetMigMode(self, device: Any, mode: Any, activation: Any) -> None:
        """Only the pending mode changes; it becomes current at a GPU reset or a reboot.

        The activation status says why it is not current yet: IN_USE while a client holds the
        GPU, RESET_REQUIRED otherwise (nvmlDeviceSetMigMode docs: "activationStatus would
        return NVML_ERROR_RESET_REQUIRED ... NVML_ERROR_IN_USE ... if the device isn't idle").
        """
        gpu = self._gpu(device)
        self._mig_model(gpu, enabled=False)
        wanted = _int(mode)
        if wanted not in (pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_ENABLE):
            raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if not wanted and gpu["mig_current"] and gpu["gpu_instances"]:
            raise _Fail(pynvml.NVML_ERROR_IN_USE)
        gpu["mig_pending"] = bool(wanted)
        if gpu["mig_pending"] == gpu["mig_current"]:
            status = pynvml.NVML_SUCCESS
        elif sim_state.holders(gpu):
            status = pynvml.NVML_ERROR_IN_USE
        else:
            status = pynvml.NVML_ERROR_RESET_REQUIRED
        _store(activation, status)

    # -- GPU instance profiles and placements ----------------------------------------------

    def nvmlDeviceGetGpuInstanceProfileInfo(self, device: Any, const: Any, info: Any) -> None:
        self._profile_info(device, _int(const), info, pynvml.c_nvmlGpuInstanceProfileInfo_t)

    def nvmlDeviceGetGpuInstanceProfileInfoV(self, device: Any, const: Any, info: Any) -> None:
        self._profile_info(device, _int(const), info, pynvml.c_nvmlGpuInstanceProfileInfo_v2_t)

    def _profile_info(self, device: Any, const: int, info: Any, struct: type) -> None:
        model = self._mig_model(self._gpu(device), enabled=False)
        if const >= pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT:
            raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        profile = next((p for p in model.profiles if p.const == const), None)
        if profile is None:
            raise _Fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        _fill_profile_info(info, struct, profile)

    def nvmlDeviceGetGpuInstanceProfileInfoByIdV(
        self, device: Any, profile_id: Any, info: Any
    ) -> None:
        model = self._mig_model(self._gpu(device), enabled=False)
        profile = self._profile_by_id(model, _int(profile_id))
        _fill_profile_info(info, pynvml.c_nvmlGpuInstanceProfileInfo_v2_t, profile)

    def nvmlDeviceGetGpuInstancePossiblePlacements_v2(
        self, device: Any, profile_id: Any, placements: Any, count: Any
    ) -> None:
        # Answered whatever the MIG mode ("regardless of whether MIG is enabled or not",
        # nvmlDeviceGetGpuInstancePossiblePlacements_v2 docs).
        model = self._mig_model(self._gpu(device), enabled=False)
        profile = self._profile_by_id(model, _int(profile_id))
        _write_array(
            placements,
            count,
            [
                pynvml.c_nvmlGpuInstancePlacement_t(start, size)
                for start, size in profile.placements
            ],
        )

    def nvmlDeviceGetGpuInstanceRemainingCapacity(
        self, device: Any, profile_id: Any, count: Any
    ) -> None:
        gpu = self._gpu(device)
        model = self._mig_model(gpu, enabled=True)
        profile = self._profile_by_id(model, _int(profile_id))
        _store(count, _capacity(gpu, model, profile))

    # -- GPU instances ---------------------------------------------------------------------

    def nvmlDeviceCreateGpuInstance(self, device: Any, profile_id: Any, instance: Any) -> None:
        gpu = self._gpu(device)
        model = self._mig_model(gpu, enabled=True)
        profile = self._profile_by_id(model, _int(profile_id))
        free = _free_placements(gpu, model, profile)
        if not free:
            raise _Fail(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        # NVML's choice is undocumented; one real capture put the first of two 3g GIs at 4:4
        # (nvidia-smi mig -lgipp; NVIDIA MIG User Guide), so the simulation takes the highest free
        # start.
        self._create_gi(gpu, model, profile, free[-1], instance)

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, device: Any, profile_id: Any, placement: Any, instance: Any
    ) -> None:
        gpu = self._gpu(device)
        model = self._mig_model(gpu, enabled=True)
        profile = self._profile_by_id(model, _int(profile_id))
        wanted = _deref(placement)
        # The C function takes `const nvmlGpuInstancePlacement_t *`: callers pass byref(placement);
        # a struct passed by value would be garbage to the real library, so it is refused here.
        if not (
            isinstance(placement, (_CARG, ctypes._Pointer))
            and isinstance(wanted, pynvml.c_nvmlGpuInstancePlacement_t)
        ):
            raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        where = (wanted.start, wanted.size)
        if where not in _free_placements(gpu, model, profile):
            raise _Fail(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        self._create_gi(gpu, model, profile, where, instance)

    def _create_gi(
        self,
        gpu: dict[str, Any],
        model: catalog.GpuModel,
        profile: catalog.MigProfile,
        where: tuple[int, int],
        instance: Any,
    ) -> None:
        gi_id = _gpu_instance_id(model, where, {gi["id"] for gi in gpu["gpu_instances"]})
        gpu["gpu_instances"].append(
            {
                "id": gi_id,
                "profile_id": profile.id,
                "start": where[0],
                "size": where[1],
                "compute_instances": [],
            }
        )
        _store_handle(instance, _encode(KIND_GPU_INSTANCE, gpu["index"], gi_id))

    def nvmlDeviceGetGpuInstances(
        self, device: Any, profile_id: Any, instances: Any, count: Any
    ) -> None:
        gpu = self._gpu(device)
        model = self._mig_model(gpu, enabled=True)
        profile = self._profile_by_id(model, _int(profile_id))
        found = sorted(
            (gi for gi in gpu["gpu_instances"] if gi["profile_id"] == profile.id),
            key=lambda gi: gi["id"],
        )
        _write_array(
            instances,
            count,
            [
                _pointer(
                    pynvml.c_nvmlGpuInstance_t, _encode(KIND_GPU_INSTANCE, gpu["index"], gi["id"])
                )
                for gi in found
            ],
        )

    def nvmlDeviceGetGpuInstanceById(self, device: Any, gi_id: Any, instance: Any) -> None:
        gpu = self._gpu(device)
        self._mig_model(gpu, enabled=True)
        wanted = _int(gi_id)
        if not any(gi["id"] == wanted for gi in gpu["gpu_instances"]):
            raise _Fail(pynvml.NVML_ERROR_NOT_FOUND)
        _store_handle(instance, _encode(KIND_GPU_INSTANCE, gpu["index"], wanted))

    def nvmlGpuInstanceGetInfo(self, instance: Any, info: Any) -> None:
        gpu, gi = self._gpu_instance(instance)
        target = _deref(info)
        if not isinstance(target, pynvml.c_nvmlGpuInstanceInfo_t):
            raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        target.device = _pointer(pynvml.c_nvmlDevice_t, _encode(KIND_DEVICE, gpu["index"]))
        target.id, target.profileId = gi["id"], gi["profile_id"]
        target.placement.start, target.placement.size = gi["start"], gi["size"]

    def nvmlGpuInstanceDestroy(self, instance: Any) -> None:
        gpu, gi = self._gpu_instance(instance)
        if gi["compute_instances"]:
            # nvml.h: IN_USE "if ... compute instances are active on the GPU instance".
            raise _Fail(pynvml.NVML_ERROR_IN_USE)
        gpu["gpu_instances"].remove(gi)

    # -- compute instances -----------------------------------------------------------------

    def _ci_profile(self, gpu: dict[str, Any], gi: dict[str, Any], const: int) -> tuple[int, int]:
        """(slices, max instances) of CI profile ``const`` inside ``gi``."""
        if const >= pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT:
            raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        slices = CI_SLICES.get(const)
        gi_slices = self._gi_profile(gpu, gi).compute_slices
        if slices is None or slices > gi_slices:
            raise _Fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return slices, gi_slices // slices

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, instance: Any, const: Any, engine: Any, info: Any
    ) -> None:
        self._ci_profile_info(
            instance, const, engine, info, pynvml.c_nvmlComputeInstanceProfileInfo_t
        )

    def nvmlGpuInstanceGetComputeInstanceProfileInfoV(
        self, instance: Any, const: Any, engine: Any, info: Any
    ) -> None:
        self._ci_profile_info(
            instance, const, engine, info, pynvml.c_nvmlComputeInstanceProfileInfo_v2_t
        )

    def _ci_profile_info(
        self, instance: Any, const: Any, engine: Any, info: Any, struct: type
    ) -> None:
        gpu, gi = self._gpu_instance(instance)
        if _int(engine) != pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED:
            raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        slices, count = self._ci_profile(gpu, gi, _int(const))
        target = _checked_struct(info, struct, pynvml.nvmlComputeInstanceProfileInfo_v2)
        target.id, target.sliceCount, target.instanceCount = _int(const), slices, count
        if hasattr(target, "name"):
            target.name = _ci_name(self._gi_profile(gpu, gi), _int(const)).encode()

    def nvmlGpuInstanceCreateComputeInstance(
        self, instance: Any, profile_id: Any, out: Any
    ) -> None:
        gpu, gi = self._gpu_instance(instance)
        const = _int(profile_id)
        slices, count = self._ci_profile(gpu, gi, const)
        same = [ci for ci in gi["compute_instances"] if ci["profile_id"] == const]
        used = {
            s
            for ci in gi["compute_instances"]
            for s in range(ci["start"], ci["start"] + ci["size"])
        }
        gi_slices = self._gi_profile(gpu, gi).compute_slices
        starts = [
            s
            for s in range(0, gi_slices - slices + 1, slices)
            if not used & set(range(s, s + slices))
        ]
        if len(same) >= count or not starts:
            raise _Fail(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        ids = {ci["id"] for ci in gi["compute_instances"]}
        ci_id = next(i for i in range(len(ids) + 1) if i not in ids)
        gi["compute_instances"].append(
            {"id": ci_id, "profile_id": const, "start": starts[0], "size": slices}
        )
        _store_handle(out, _encode(KIND_COMPUTE_INSTANCE, gpu["index"], gi["id"], ci_id))

    def nvmlGpuInstanceGetComputeInstances(
        self, instance: Any, profile_id: Any, out: Any, count: Any
    ) -> None:
        gpu, gi = self._gpu_instance(instance)
        const = _int(profile_id)
        self._ci_profile(gpu, gi, const)
        found = sorted(
            (ci for ci in gi["compute_instances"] if ci["profile_id"] == const),
            key=lambda ci: ci["id"],
        )
        _write_array(
            out,
            count,
            [
                _pointer(
                    pynvml.c_nvmlComputeInstance_t,
                    _encode(KIND_COMPUTE_INSTANCE, gpu["index"], gi["id"], ci["id"]),
                )
                for ci in found
            ],
        )

    def nvmlComputeInstanceGetInfo_v2(self, instance: Any, info: Any) -> None:
        gpu, gi, ci = self._compute_instance(instance)
        target = _deref(info)
        if not isinstance(target, pynvml.c_nvmlComputeInstanceInfo_t):
            raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        target.device = _pointer(pynvml.c_nvmlDevice_t, _encode(KIND_DEVICE, gpu["index"]))
        target.gpuInstance = _pointer(
            pynvml.c_nvmlGpuInstance_t, _encode(KIND_GPU_INSTANCE, gpu["index"], gi["id"])
        )
        target.id, target.profileId = ci["id"], ci["profile_id"]
        target.placement.start, target.placement.size = ci["start"], ci["size"]

    def nvmlGpuInstanceGetComputeInstanceById(self, instance: Any, ci_id: Any, out: Any) -> None:
        gpu, gi = self._gpu_instance(instance)
        wanted = _int(ci_id)
        if not any(ci["id"] == wanted for ci in gi["compute_instances"]):
            raise _Fail(pynvml.NVML_ERROR_NOT_FOUND)
        _store_handle(out, _encode(KIND_COMPUTE_INSTANCE, gpu["index"], gi["id"], wanted))

    def nvmlComputeInstanceDestroy(self, instance: Any) -> None:
        _, gi, ci = self._compute_instance(instance)
        gi["compute_instances"].remove(ci)

    # -- MIG devices -----------------------------------------------------------------------

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any, count: Any) -> None:
        # nvml.h: "Returns zero if MIG is not supported or enabled" (quoted in NVIDIA/go-nvml#60);
        # go-nvlib walks that many MIG handles, so a MIG-off GPU must answer 0, not an error.
        gpu = self._gpu(device)
        model = self._mig_model(gpu, enabled=False)
        _store(count, model.compute_slices if gpu["mig_current"] else 0)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: Any, out: Any) -> None:
        gpu = self._gpu(device)
        model = self._mig_model(gpu, enabled=True)
        position = _int(index)
        if position >= model.compute_slices:
            raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        devices = self._mig_devices(gpu)
        if position >= len(devices):
            raise _Fail(pynvml.NVML_ERROR_NOT_FOUND)
        gi, ci = devices[position]
        _store_handle(out, _encode(KIND_MIG_DEVICE, gpu["index"], gi["id"], ci["id"]))

    def nvmlDeviceIsMigDeviceHandle(self, device: Any, out: Any) -> None:
        self._gpu(device, (KIND_DEVICE, KIND_MIG_DEVICE))
        _store(out, int(_decode(device)[0] == KIND_MIG_DEVICE))

    def nvmlDeviceGetGpuInstanceId(self, device: Any, out: Any) -> None:
        _, gi, _ = self._mig_device(device)
        _store(out, gi["id"])

    def nvmlDeviceGetComputeInstanceId(self, device: Any, out: Any) -> None:
        _, _, ci = self._mig_device(device)
        _store(out, ci["id"])

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, device: Any, out: Any) -> None:
        gpu, _, _ = self._mig_device(device)
        _store_handle(out, _encode(KIND_DEVICE, gpu["index"]))

    def nvmlDeviceGetAttributes_v2(self, device: Any, attributes: Any) -> None:
        """Slice counts and memory of a MIG device; engine and SM counts stay 0 (not in the
        catalog).

        nvml.h: "This API currently only supports MIG device handles."
        """
        gpu, gi, ci = self._mig_device(device)
        target = _deref(attributes)
        if not isinstance(target, pynvml.c_nvmlDeviceAttributes):
            raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        profile = self._gi_profile(gpu, gi)
        target.gpuInstanceSliceCount = profile.compute_slices
        target.computeInstanceSliceCount = CI_SLICES[ci["profile_id"]]
        target.memorySizeMB = profile.memory_mib

    def _mig_device(self, device: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        if _decode(device)[0] == KIND_DEVICE:
            raise _Fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self._compute_instance(device, KIND_MIG_DEVICE)

    # -- health ----------------------------------------------------------------------------
    # ECC counts answer on every catalog model (all are data-center GPUs with ECC memory); row
    # remapping only on models whose catalog memory_repair is row-remapping, page retirement only
    # on page-retirement models: the other family's calls are NOT_SUPPORTED, as on the real
    # driver (NVIDIA GPU Memory Error Management, Supported GPUs).

    def nvmlDeviceGetTotalEccErrors(
        self, device: Any, error_type: Any, counter_type: Any, count: Any
    ) -> None:
        _store(count, self._ecc(device, error_type, counter_type))

    def nvmlDeviceGetMemoryErrorCounter(
        self, device: Any, error_type: Any, counter_type: Any, location: Any, count: Any
    ) -> None:
        """The simulated errors all sit in device memory (DRAM); caches and SRAM count 0."""
        where = _int(location)
        if where >= pynvml.NVML_MEMORY_LOCATION_COUNT:
            raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        errors = self._ecc(device, error_type, counter_type)
        _store(count, errors if where == pynvml.NVML_MEMORY_LOCATION_DRAM else 0)

    def _ecc(self, device: Any, error_type: Any, counter_type: Any) -> int:
        gpu = self._gpu(device)
        kind = {
            pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED: "corrected",
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED: "uncorrected",
        }.get(_int(error_type))
        counter = {
            pynvml.NVML_VOLATILE_ECC: "volatile",
            pynvml.NVML_AGGREGATE_ECC: "aggregate",
        }.get(_int(counter_type))
        if kind is None or counter is None:
            raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return sim_state.health(gpu)["ecc"][kind][counter]

    def nvmlDeviceGetRemappedRows(
        self, device: Any, corrected: Any, uncorrected: Any, pending: Any, failure: Any
    ) -> None:
        """NOT_SUPPORTED also on a MIG GPU with instances ("On MIG-enabled GPUs with active
        instances, querying the number of remapped rows is not supported", NVML docs)."""
        gpu = self._gpu(device)
        if self._model(gpu).memory_repair != "row-remapping" or (
            gpu["mig_current"] and gpu["gpu_instances"]
        ):
            raise _Fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        rows = sim_state.health(gpu)["remapped_rows"]
        _store(corrected, rows["corrected"])
        _store(uncorrected, rows["uncorrected"])
        _store(pending, int(rows["pending"]))
        _store(failure, int(rows["failure"]))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: Any, pending: Any) -> None:
        _store(pending, int(self._retired(device)["pending"]))

    def nvmlDeviceGetRetiredPages(
        self, device: Any, cause: Any, count: Any, addresses: Any
    ) -> None:
        self._retired_pages(device, cause, count, addresses, None)

    def nvmlDeviceGetRetiredPages_v2(
        self, device: Any, cause: Any, count: Any, addresses: Any, timestamps: Any = None
    ) -> None:
        # pynvml's size query passes no timestamps argument at all (a NULL in C).
        self._retired_pages(device, cause, count, addresses, timestamps)

    def _retired(self, device: Any) -> dict[str, Any]:
        gpu = self._gpu(device)
        if self._model(gpu).memory_repair != "page-retirement":
            raise _Fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return sim_state.health(gpu)["retired_pages"]

    def _retired_pages(
        self, device: Any, cause: Any, count: Any, addresses: Any, timestamps: Any
    ) -> None:
        """nvml.h: ``pageCount`` in is the buffer's size, out the number of pages; a buffer too
        small (0 with no buffer asks for the size) is INSUFFICIENT_SIZE with the count set."""
        retired = self._retired(device)
        key = {
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: "single_bit",
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: "double_bit",
        }.get(_int(cause))
        if key is None:
            raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        pages = retired[key]
        room = _int(_deref(count))
        _store(count, len(pages))
        if room < len(pages):
            raise _Fail(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        for target, field in ((_deref(addresses), "address"), (_deref(timestamps), "timestamp")):
            if target is None:
                continue
            if not isinstance(target, ctypes.Array) or len(target) < len(pages):
                raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            for i, page in enumerate(pages):
                target[i] = page[field]


FUNCTIONS: frozenset[str] = frozenset(name for name in vars(_Driver) if name.startswith("nvml")) | {
    "nvmlShutdown",
    "nvmlErrorString",
}


def nvml_version(driver_version: str) -> str:
    """NVML's version: the CUDA major of the driver branch, then the driver version.

    R580 drivers report CUDA 13.0, R525-R575 CUDA 12.x, older ones CUDA 11.x (nvidia-smi
    headers in NVIDIA/gpu-operator and Project-HAMi issues).

    >>> nvml_version("535.261.03")
    '12.535.261.03'
    """
    branch = int(driver_version.split(".")[0])
    cuda = 13 if branch >= 580 else 12 if branch >= 525 else 11
    return f"{cuda}.{driver_version}"


def cuda_driver_version(driver_version: str) -> int:
    """The CUDA version NVML reports (``1000 * major``): the major of ``nvml_version``.

    >>> cuda_driver_version("550.127.05")
    12000
    """
    return int(nvml_version(driver_version).split(".")[0]) * 1000


def _gpu_instance_id(model: catalog.GpuModel, where: tuple[int, int], taken: set[int]) -> int:
    """The GI id NVML gives a placement: its node in a binary tree over the memory slots.

    Real captures number GIs by where they sit, not by creation order: 7g -> 0, 3g at 0/4 -> 1/2,
    2g at 0/2/4 -> 3/4/5, 1g at slot k -> 7+k (NVIDIA/DCGM#138, NVIDIA/go-nvml#146,
    kubernetes-sigs/dra-driver-nvidia-gpu#933).
    """
    start, size = where
    slots = model.memory_slots
    node = slots // size - 1 + start // size
    if slots % size == 0 and start % size == 0 and node not in taken:
        return node
    return next(i for i in range(1, len(taken) + 2) if i not in taken)


def _free_placements(
    gpu: dict[str, Any], model: catalog.GpuModel, profile: catalog.MigProfile
) -> list[tuple[int, int]]:
    """The placements of ``profile`` a new GI could take now, lowest start first.

    Empty when the profile is at its maximum count or the compute slices are spent; otherwise the
    profile's placements that overlap no existing GI ("Creation of new GPU instance will fail if
    there is overlap with the already occupied memory slices", NVML docs).
    """
    instances = gpu["gpu_instances"]
    if sum(gi["profile_id"] == profile.id for gi in instances) >= profile.max_instances:
        return []
    used_compute = sum(model.profile_by_id(gi["profile_id"]).compute_slices for gi in instances)
    if used_compute + profile.compute_slices > model.compute_slices:
        return []
    occupied = {slot for gi in instances for slot in range(gi["start"], gi["start"] + gi["size"])}
    return [
        (start, size)
        for start, size in profile.placements
        if not occupied & set(range(start, start + size))
    ]


def _capacity(gpu: dict[str, Any], model: catalog.GpuModel, profile: catalog.MigProfile) -> int:
    """How many more GIs of ``profile`` fit: free placements, count left, compute left."""
    free = _free_placements(gpu, model, profile)
    if not free:
        return 0
    instances = gpu["gpu_instances"]
    left = profile.max_instances - sum(gi["profile_id"] == profile.id for gi in instances)
    used = sum(model.profile_by_id(gi["profile_id"]).compute_slices for gi in instances)
    return min(len(free), left, (model.compute_slices - used) // profile.compute_slices)


def _ci_name(gi_profile: catalog.MigProfile, ci_const: int) -> str:
    """``MIG 3g.40gb`` for the CI spanning the GI, ``MIG 1c.3g.40gb`` for a smaller one."""
    slices = CI_SLICES[ci_const]
    if slices == gi_profile.compute_slices:
        return f"MIG {gi_profile.name}"
    return f"MIG {slices}c.{gi_profile.name}"


def _mig_uuid(gpu: dict[str, Any], gi: dict[str, Any], ci: dict[str, Any]) -> str:
    name = "/".join((gpu["uuid"], str(gi["id"]), str(ci["id"])))
    return f"MIG-{uuid.uuid5(MIG_UUID_NAMESPACE, name)}"


def _fill_profile_info(info: Any, struct: type, profile: catalog.MigProfile) -> None:
    target = _checked_struct(info, struct, pynvml.nvmlGpuInstanceProfileInfo_v2)
    target.id = profile.id
    target.isP2pSupported = 0
    target.sliceCount = profile.compute_slices
    target.instanceCount = profile.max_instances
    # The catalog holds no SM or engine counts, so those fields stay 0.
    target.memorySizeMB = profile.memory_mib
    if hasattr(target, "name"):
        target.name = f"MIG {profile.name}".encode()


def _checked_struct(info: Any, struct: type, version: int) -> Any:
    """The struct behind ``info``; a versioned struct must carry ``version``."""
    target = _deref(info)
    if not isinstance(target, struct):
        raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    if hasattr(target, "version") and target.version != version:
        raise _Fail(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    return target


# -- ctypes plumbing -------------------------------------------------------------------------


def _encode(kind: int, gpu: int, gi: int = 0, ci: int = 0) -> int:
    return HANDLE_TAG << 44 | kind << 36 | gpu << 24 | gi << 12 | ci


def _decode(handle: Any) -> tuple[int, int, int, int]:
    """(kind, GPU index, GI id, CI id) of a handle pynvml passes; kind 0 when it is not ours."""
    if isinstance(handle, int):
        value = handle
    elif isinstance(handle, (ctypes._Pointer, ctypes.c_void_p)):
        value = ctypes.cast(handle, ctypes.c_void_p).value or 0
    else:
        return 0, 0, 0, 0
    if value >> 44 != HANDLE_TAG:
        return 0, 0, 0, 0
    return value >> 36 & 0xFF, value >> 24 & 0xFFF, value >> 12 & 0xFFF, value & 0xFFF


def _pointer(pointer_type: Any, value: int) -> Any:
    return ctypes.cast(ctypes.c_void_p(value), pointer_type)


def _deref(ref: Any) -> Any:
    """The object an out-parameter points at: ``byref(x)`` and ``pointer(x)`` give ``x``."""
    if isinstance(ref, _CARG):
        return ref._obj
    if isinstance(ref, ctypes._Pointer):
        return ref.contents
    return ref


def _int(value: Any) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, ctypes._SimpleCData) and isinstance(value.value, int):
        return value.value
    raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)


def _store(ref: Any, value: int) -> None:
    target = _deref(ref)
    if not isinstance(target, ctypes._SimpleCData):
        raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    target.value = value
    if target.value != value:  # ctypes wraps silently; a driver never hands out a wrapped count
        raise OverflowError(f"{value} does not fit the caller's {type(target).__name__}")


def _store_handle(ref: Any, value: int) -> None:
    target = _deref(ref)
    if not isinstance(target, (ctypes._Pointer, ctypes.c_void_p)):
        raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    ctypes.c_void_p.from_buffer(target).value = value


def _write_string(buffer: Any, length: Any, text: str) -> None:
    data = text.encode()
    if not isinstance(buffer, ctypes.Array) or len(data) + 1 > _int(length):
        raise _Fail(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
    buffer.value = data


def _write_array(out: Any, count: Any, items: list[Any]) -> None:
    """Fill a caller's array the C way: NULL asks only for the count; too small is an error.

    The NVML docs say the buffer must hold everything the profile allows, so like the C library
    the input count is not read; a ctypes array's own length still guards the copy.
    """
    _store(count, len(items))
    target = _deref(out)
    if target is None:
        return
    if isinstance(target, ctypes.Array):
        if len(target) < len(items):
            raise _Fail(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        for i, item in enumerate(items):
            target[i] = item
    elif len(items) <= 1 and isinstance(target, (ctypes.Structure, ctypes._Pointer)):
        if items:
            ctypes.memmove(
                ctypes.addressof(target), ctypes.addressof(items[0]), ctypes.sizeof(items[0])
            )
    else:
        raise _Fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
