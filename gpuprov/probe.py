"""The probe: what NVML and a few files say about this host, as one JSON document.

Runs on GPU hosts inside the agent zipapp, so it needs only the standard library and
nvidia-ml-py's ``pynvml``. One ``nvmlInit`` per run, always matched by ``nvmlShutdown``. When NVML
cannot start (no library, no driver, no permission) the document says so in ``nvml``/``error``
and the exit code is still 0: "no driver" is an observation, not a failure of the probe.

Schema ``gpuprov.probe/v1`` (docs/architecture.md). GI profiles are walked the way mig-parted
does: every NVML_GPU_INSTANCE_PROFILE_* constant gives a profile info whose ``id`` (the other
numbering, the one ``-cgi`` and ``GpuInstanceInfo.profileId`` use) lists that profile's GIs.

    $ python3 -m gpuprov.probe --file /etc/nvidia/device-plugin/config.yaml
    {"schema": "gpuprov.probe/v1", "nvml": "ok", "driver_version": "550.127.05", ...}
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import pynvml

from gpuprov.agent import containerd_state
from gpuprov.contract import NVML_PROFILE_ABSENT, PROBE_SCHEMA, SIM_ENV, containerd_drop_in_path

# What NVML answers for a profile constant the GPU or GI does not have; mig-parted skips both.
_INIT_FAILURES = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: "library-not-found",
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "driver-not-loaded",
    pynvml.NVML_ERROR_NO_PERMISSION: "no-permission",
}


def probe(
    files: Sequence[str] = (), globs: Sequence[str] = (), containerd: str | None = None
) -> dict[str, Any]:
    """The probe document for this host; ``files``/``globs`` add a ``files`` section,
    ``containerd`` (the main config's path) a ``containerd`` section: what containerd says
    about its effective config (``gpuprov.agent.containerd_state``).

    >>> probe()["nvml"]            # on a machine without libnvidia-ml  # doctest: +SKIP
    'library-not-found'
    """
    document: dict[str, Any] = {
        "schema": PROBE_SCHEMA,
        "nvml": "ok",
        "error": None,
        "driver_version": None,
        "nvml_version": None,
        "gpus": [],
    }
    document.update(_nvml())
    if files or globs:
        document["files"] = read_files(files, globs)
    if containerd:
        document["containerd"] = containerd_state.read(
            containerd, containerd_drop_in_path(containerd)
        )
    return document


def _nvml() -> dict[str, Any]:
    try:
        init_nvml()
    except pynvml.NVMLError as e:
        return {"nvml": _INIT_FAILURES.get(e.value, "error"), "error": str(e)}
    except ImportError as e:
        return {
            "nvml": "error",
            "error": f"{SIM_ENV} is set but the simulation is not importable: {e}",
        }
    found: dict[str, Any] = {}
    try:
        found["driver_version"] = pynvml.nvmlSystemGetDriverVersion()
        found["nvml_version"] = pynvml.nvmlSystemGetNVMLVersion()
        found["gpus"] = [read_gpu(index) for index in range(pynvml.nvmlDeviceGetCount())]
    except pynvml.NVMLError as e:
        found.update(nvml="error", error=str(e), gpus=[])
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as e:
            found.setdefault("error", f"nvmlShutdown: {e}")
            found.setdefault("nvml", "error")
    return found


def init_nvml() -> None:
    """``nvmlInit``, routed to the simulated driver under ``GPUPROV_NVML_SIM`` (lab and tests)."""
    path = os.environ.get(SIM_ENV)
    if path:
        from gpuprov.sim import install  # lazy: production hosts do not ship the simulation

        install(path)
    pynvml.nvmlInit()


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
    return gpu


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


def read_files(files: Sequence[str], globs: Sequence[str]) -> dict[str, str | None]:
    """Text of each file (``None`` when missing or unreadable); globs add every matching file.

    >>> read_files(["/nonexistent"], [])
    {'/nonexistent': None}
    """
    paths = list(files)
    for pattern in globs:
        paths += sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
    texts: dict[str, str | None] = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                texts[path] = f.read()
        except OSError:
            texts[path] = None
    return texts


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuprov-probe", description="Print what NVML and some files say, as JSON."
    )
    parser.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="PATH",
        help="include this file's text (repeatable)",
    )
    parser.add_argument(
        "--glob",
        action="append",
        default=[],
        metavar="PATTERN",
        help="include every file matching PATTERN (repeatable)",
    )
    parser.add_argument(
        "--containerd",
        metavar="PATH",
        help="include containerd's release, effective config and CRI plugin state for the "
        "main config at PATH",
    )
    parser.add_argument("--format", choices=["json"], default="json", help="output format")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Print the probe document; 0 whatever NVML said, 2 for a bad command line."""
    try:
        options = _parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    print(json.dumps(probe(options.file, options.glob, options.containerd), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
