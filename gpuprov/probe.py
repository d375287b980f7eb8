"""The probe: what NVML and a few files say about this host, as one JSON document.

Runs on GPU hosts inside the agent zipapp, so it needs only the standard library and
nvidia-ml-py's ``pynvml``. One ``nvmlInit`` per run, always matched by ``nvmlShutdown``. When NVML
cannot start (no library, no driver, no permission) the document says so in ``nvml``/``error``
and the exit code is still 0: "no driver" is an observation, not a failure of the probe.

Schema ``gpuprov.probe/v1`` (docs/architecture.md). GI profiles are walked the way mig-parted
does: every NVML_GPU_INSTANCE_PROFILE_* constant gives a profile info whose ``id`` (the other
numbering, the one ``-cgi`` and ``GpuInstanceInfo.profileId`` use) lists that profile's GIs.

The ``files`` section holds each requested file's text, ``null`` for a file that does not
exist, and ``{"error": why}`` for one the probe does not read: larger than
``PROBE_FILE_MAX_BYTES`` (1 MiB), not a regular file (``/dev/zero``, a FIFO, a directory) or
unreadable. Reads never block and never hold more than the limit in memory. With
``--kubelet-devices DIR`` the ``kubelet_devices`` section holds the kubelet's device-manager
checkpoint (read the same way, up to ``KUBELET_CHECKPOINT_MAX_BYTES``) and the socket names in
DIR (``gpuprov/agent/kubelet_devices.py``).

    $ python3 -m gpuprov.probe --file /etc/nvidia/device-plugin/config.yaml
    {"schema": "gpuprov.probe/v1", "nvml": "ok", "driver_version": "535.261.03", ...}
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import importlib
import importlib.util
import json
import os
import stat
import sys
from collections.abc import Sequence
from typing import Any

import pynvml

from gpuprov.agent import containerd_state, kubelet_devices
from gpuprov.contract import (
    KERNEL_LOG_PATH,
    KUBELET_CHECKPOINT_MAX_BYTES,
    KUBELET_DEVICE_CHECKPOINT_NAME,
    NVML_PROFILE_ABSENT,
    PROBE_FILE_MAX_BYTES,
    PROBE_SCHEMA,
    SIM_ENV,
    SIM_PYTHON_DIR,
    SIM_PYTHON_ENV,
    containerd_drop_in_path,
)
from gpuprov.health import kernel_log, nvml_counters
from gpuprov.health import section as health_section

# What NVML answers for a profile constant the GPU or GI does not have; mig-parted skips both.
_INIT_FAILURES = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: "library-not-found",
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "driver-not-loaded",
    pynvml.NVML_ERROR_NO_PERMISSION: "no-permission",
}


def probe(
    files: Sequence[str] = (),
    globs: Sequence[str] = (),
    containerd: str | None = None,
    health: bool = False,
    kernel_log_path: str = KERNEL_LOG_PATH,
    kubelet_devices_dir: str | None = None,
) -> dict[str, Any]:
    """The probe document for this host; ``files``/``globs`` add a ``files`` section,
    ``containerd`` (the main config's path) a ``containerd`` section: what containerd says
    about its effective config (``gpuprov.agent.containerd_state``); ``health`` a ``health``
    section: each GPU's NVML error counters and the XIDs in the kernel log at
    ``kernel_log_path`` (``gpuprov.health``); ``kubelet_devices_dir`` (the kubelet's
    device-plugin directory) a ``kubelet_devices`` section (``kubelet_devices``).

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
    counters: dict[int, dict[str, Any]] = {}
    document.update(_nvml(counters if health else None))
    if health:
        document["health"] = health_section.section(
            document["gpus"], counters, kernel_log.read(kernel_log_path)
        )
    if files or globs:
        document["files"] = read_files(files, globs)
    if containerd:
        document["containerd"] = containerd_state.read(
            containerd, containerd_drop_in_path(containerd)
        )
    if kubelet_devices_dir:
        document["kubelet_devices"] = read_kubelet_devices(kubelet_devices_dir)
    return document


def read_kubelet_devices(directory: str) -> dict[str, Any]:
    """What the kubelet registered: its device-manager checkpoint's text (as ``read_file``
    reports a file, up to ``KUBELET_CHECKPOINT_MAX_BYTES``) and the sockets in ``directory``.

    >>> read_kubelet_devices("/nonexistent")
    {'directory': '/nonexistent', 'checkpoint': None, 'sockets': None}
    """
    checkpoint = os.path.join(directory, KUBELET_DEVICE_CHECKPOINT_NAME)
    return {
        "directory": directory,
        "checkpoint": read_file(checkpoint, KUBELET_CHECKPOINT_MAX_BYTES),
        "sockets": kubelet_devices.sockets(directory),
    }


class SimulatedDriverError(Exception):
    """``GPUPROV_NVML_SIM`` is set but the simulated driver cannot be used; the message says why."""


def _nvml(counters: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    """NVML's part of the document; fills ``counters`` (GPU index -> health readings) when
    given, inside the same ``nvmlInit``."""
    try:
        init_nvml()
    except pynvml.NVMLError as e:
        return {"nvml": _INIT_FAILURES.get(e.value, "error"), "error": str(e)}
    except SimulatedDriverError as e:
        return {"nvml": "error", "error": str(e)}
    found: dict[str, Any] = {}
    try:
        found["driver_version"] = pynvml.nvmlSystemGetDriverVersion()
        found["nvml_version"] = pynvml.nvmlSystemGetNVMLVersion()
        found["gpus"] = [read_gpu(index) for index in range(pynvml.nvmlDeviceGetCount())]
        if counters is not None:
            for gpu in found["gpus"]:
                device = pynvml.nvmlDeviceGetHandleByIndex(gpu["index"])
                counters[gpu["index"]] = nvml_counters.read(device)
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
    """``nvmlInit``, routed to the simulated driver under ``GPUPROV_NVML_SIM`` (lab and tests).

    Without the simulator installed, NVML's "library not found", as on a host without a driver;
    SimulatedDriverError when its state file is malformed.
    """
    path = os.environ.get(SIM_ENV)
    if path:
        simulator = _simulator()
        try:
            simulator.install(path)
        except simulator.StateError as e:
            raise SimulatedDriverError(f"simulated driver ({SIM_ENV}): {e}") from None
    pynvml.nvmlInit()


def _simulator() -> Any:
    """The ``gpuprov.sim`` package: in a source tree it is importable as is; the agent bundle
    does not carry it, so on a lab host it comes from where the lab's simulated driver package
    installed it (``SIM_PYTHON_DIR``), as the real driver's library comes from the driver."""
    import gpuprov

    directory = os.path.join(os.environ.get(SIM_PYTHON_ENV) or SIM_PYTHON_DIR, "gpuprov")
    if importlib.util.find_spec("gpuprov.sim") is None and directory not in gpuprov.__path__:
        # Appended: what the bundle has (contract, probe) still comes from the bundle.
        gpuprov.__path__.append(directory)
    try:
        return importlib.import_module("gpuprov.sim")
    except ImportError:
        # Not installed yet is what a host without the driver package says: no NVML library.
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND) from None


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


def read_files(files: Sequence[str], globs: Sequence[str]) -> dict[str, Any]:
    """Each file's text; ``None`` when it does not exist, ``{"error": why}`` when it is not read
    (larger than ``PROBE_FILE_MAX_BYTES``, not a regular file, unreadable). Globs add every
    matching regular file.

    >>> read_files(["/nonexistent", "/dev/zero"], [])
    {'/nonexistent': None, '/dev/zero': {'error': 'not a regular file (character device)'}}
    """
    paths = list(files)
    for pattern in globs:
        paths += sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
    return {path: read_file(path) for path in paths}


def read_file(path: str, limit: int = PROBE_FILE_MAX_BYTES) -> str | dict[str, str] | None:
    """One file as ``read_files`` reports it, never reading more than ``limit`` + 1 bytes."""
    try:
        # O_NONBLOCK: opening a FIFO that has no writer must not wait for one.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        return {"error": f"unreadable: {e.strerror}"}
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return {"error": f"not a regular file ({_file_kind(info.st_mode)})"}
        if info.st_size > limit:
            return {"error": f"larger than {limit} bytes ({info.st_size}); the probe reads no more"}
        chunks, size = [], 0
        while size <= limit:  # st_size can be 0 for files whose size the kernel does not know
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            return {"error": f"larger than {limit} bytes; the probe reads no more"}
        return b"".join(chunks).decode("utf-8", errors="replace")
    except OSError as e:
        return {"error": f"unreadable: {e.strerror}"}
    finally:
        os.close(fd)


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    )
    return next((name for test, name in kinds if test(mode)), "special file")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuprov-probe", description="Print what NVML and some files say, as JSON."
    )
    parser.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="PATH",
        help=f"include this file's text (repeatable; at most {PROBE_FILE_MAX_BYTES} bytes, "
        'else {"error": why})',
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
    parser.add_argument(
        "--health",
        action="store_true",
        help="include each GPU's ECC, row remapping and retired pages, and the kernel log's XIDs",
    )
    parser.add_argument(
        "--kubelet-devices",
        metavar="DIR",
        help="include the kubelet's device-manager checkpoint and the socket names in DIR "
        "(the kubelet's device-plugin directory)",
    )
    parser.add_argument("--format", choices=["json"], default="json", help="output format")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Print the probe document; 0 whatever NVML said, 2 for a bad command line."""
    try:
        options = _parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    document = probe(
        options.file,
        options.glob,
        options.containerd,
        options.health,
        kubelet_devices_dir=options.kubelet_devices,
    )
    print(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
