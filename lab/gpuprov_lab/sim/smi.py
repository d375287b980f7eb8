"""``gpuprov-sim-nvidia-smi``: the subset of ``nvidia-smi`` gpuprov and its tests use, simulated.

Everything goes through nvidia-ml-py with the simulated library installed (``gpuprov_lab.sim``), so
the MIG rules live in one place (``nvml.py``); only the GPU reset, which NVML has no call for,
works on the state file directly (``state.reset_gpu``). Output follows the real tool's shapes:

- ``-L`` and MIG device lines: DataDog/datadog-agent#33120;
- ``mig -lgip``: NVIDIA/mig-parted#97 and #187; ``mig -lgipp``: the NVIDIA H100 NVL MIG blog;
- ``mig -lgi``: NVIDIA/DCGM#138; ``mig -lci`` and ``-dci``/``-dgi`` lines: NVIDIA/go-nvml#146 and
  public nvidia-smi MIG notes; ``-cgi``/``-cci`` lines: rapidsai/dask-cuda#583;
- ``-mig``: NVIDIA/gpu-operator#118 (pending warning); ``-r``: NVIDIA/NVSentinel#1690 and
  NVIDIA/mig-parted#181; "No ... instances found": GoogleCloudPlatform/container-engine-
  accelerators#444. Exit codes follow nvidia-smi(1) RETURN VALUE (2 bad argument, 3 not
  supported, 4 no permission, 6 not found, 9 driver not loaded, 12 no NVML, 255 other).

>>> main(["mig", "-cgi", "9:4,14", "-C", "-i", "0"])   # doctest: +SKIP
Successfully created GPU instance ID  2 on GPU  0 using profile MIG 3g.40gb (ID  9)
Successfully created compute instance ID  0 on GPU  0 GPU instance ID  2 using profile MIG ...
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import pynvml

from gpuprov.host.contract import NVML_PROFILE_ABSENT, SIM_ENV, SIM_STATE_PATH
from gpuprov_lab.sim import StateError, install
from gpuprov_lab.sim import state as sim_state

EXIT_OK, EXIT_ARGUMENT, EXIT_NOT_SUPPORTED, EXIT_PERMISSION = 0, 2, 3, 4
EXIT_NOT_FOUND, EXIT_DRIVER, EXIT_LIBRARY, EXIT_OTHER = 6, 9, 12, 255
_IN_USE_HINT = (
    "currently being used by one or more other processes (e.g., Fabric Manager, "
    "CUDA application, graphics application such as an X server, or a monitoring "
    "application such as another instance of nvidia-smi). Please first kill all "
    "processes using {this} and all compute applications running in the system."
)


class SmiError(Exception):
    """Stop with ``message`` (printed as is) and exit code ``code``."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``nvidia-smi`` command line; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    path = os.environ.get(SIM_ENV) or SIM_STATE_PATH
    try:
        if args[:1] == ["mig"]:
            options = _mig_parser().parse_args(args[1:])
            command = _mig_command(options)
        else:
            options = _parser().parse_args(args)
            command = _gpu_command(options)
    except SystemExit as e:  # argparse: usage on stderr, exit 2 (or 0 for -h)
        return int(e.code or 0)
    try:
        return _run(path, lambda: command(path, options))
    except SmiError as e:
        print(e)
        return e.code


def _run(path: str, command: Callable[[], int]) -> int:
    try:
        install(path)
    except StateError as e:
        print(f"Failed to initialize NVML: {e}")
        return EXIT_OTHER
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        print(
            "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure "
            "that the NVIDIA Display Driver is properly installed and present in your system."
        )
        return EXIT_LIBRARY
    except pynvml.NVMLError_DriverNotLoaded:
        print(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running."
        )
        return EXIT_DRIVER
    except pynvml.NVMLError as e:
        print(f"Failed to initialize NVML: {e}")
        return _exit_code(e)
    try:
        return command()
    except pynvml.NVMLError as e:
        print(f"Failed to complete the command: {e}")
        return _exit_code(e)
    finally:
        pynvml.nvmlShutdown()


def _exit_code(error: pynvml.NVMLError) -> int:
    return {
        pynvml.NVML_ERROR_INVALID_ARGUMENT: EXIT_ARGUMENT,
        pynvml.NVML_ERROR_NOT_SUPPORTED: EXIT_NOT_SUPPORTED,
        pynvml.NVML_ERROR_NO_PERMISSION: EXIT_PERMISSION,
        pynvml.NVML_ERROR_NOT_FOUND: EXIT_NOT_FOUND,
    }.get(error.value, EXIT_OTHER)


# -- command lines -------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nvidia-smi",
        allow_abbrev=False,
        description="Simulated NVIDIA System Management Interface.",
    )
    parser.add_argument("-i", "--id", help="GPU index, or a comma-separated list of them")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("-L", "--list-gpus", action="store_true", help="list GPUs and MIG devices")
    group.add_argument("--query-gpu", metavar="FIELDS", help="comma-separated fields to print")
    group.add_argument(
        "-mig",
        "--multi-instance-gpu",
        choices=["0", "1"],
        help="set the pending MIG mode (1 enable, 0 disable)",
    )
    group.add_argument("-r", "--gpu-reset", action="store_true", help="reset the GPUs")
    parser.add_argument("--format", help="csv[,noheader][,nounits] (with --query-gpu)")
    return parser


def _mig_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nvidia-smi mig", allow_abbrev=False)
    parser.add_argument("-i", "--id", help="GPU index, or a comma-separated list of them")
    parser.add_argument("-gi", "--gpu-instance-id", help="GPU instance ids (comma-separated)")
    parser.add_argument("-ci", "--compute-instance-id", help="compute instance ids")
    parser.add_argument(
        "-C",
        "--default-compute-instance",
        action="store_true",
        help="with -cgi: also create the default compute instance",
    )
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("-lgip", "--list-gpu-instance-profiles", action="store_true")
    group.add_argument("-lgipp", "--list-gpu-instance-possible-placements", action="store_true")
    group.add_argument("-lgi", "--list-gpu-instances", action="store_true")
    group.add_argument("-lci", "--list-compute-instances", action="store_true")
    group.add_argument(
        "-cgi",
        "--create-gpu-instance",
        metavar="PROFILES",
        help="profile ids or names, each optionally :START, comma-separated",
    )
    group.add_argument(
        "-cci",
        "--create-compute-instance",
        metavar="PROFILES",
        nargs="?",
        const="",
        help="compute instance profile ids (default: the full one)",
    )
    group.add_argument("-dci", "--destroy-compute-instance", action="store_true")
    group.add_argument("-dgi", "--destroy-gpu-instance", action="store_true")
    return parser


Command = Callable[[str, argparse.Namespace], int]


def _gpu_command(options: argparse.Namespace) -> Command:
    if options.list_gpus:
        return _list_gpus
    if options.query_gpu is not None:
        return _query_gpu
    if options.multi_instance_gpu is not None:
        return _set_mig_mode
    return _reset


def _mig_command(options: argparse.Namespace) -> Command:
    if options.list_gpu_instance_profiles:
        return _list_profiles
    if options.list_gpu_instance_possible_placements:
        return _list_placements
    if options.list_gpu_instances:
        return _list_gpu_instances
    if options.list_compute_instances:
        return _list_compute_instances
    if options.create_gpu_instance is not None:
        return _create_gpu_instances
    if options.create_compute_instance is not None:
        return _create_compute_instances
    if options.destroy_compute_instance:
        return _destroy_compute_instances
    return _destroy_gpu_instances


def _numbers(text: str | None, what: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise SmiError(f"Invalid {what} list: {text!r}", EXIT_ARGUMENT) from None


def _devices(options: argparse.Namespace) -> list[tuple[int, Any]]:
    """(index, handle) of the GPUs ``-i`` selects, all GPUs without ``-i``."""
    count = pynvml.nvmlDeviceGetCount()
    wanted = _numbers(options.id, "GPU index") or list(range(count))
    if any(not 0 <= index < count for index in wanted):
        raise SmiError("No devices were found", EXIT_NOT_FOUND)
    return [(index, pynvml.nvmlDeviceGetHandleByIndex(index)) for index in wanted]


def _mig_devices(options: argparse.Namespace) -> list[tuple[int, Any]]:
    """The selected GPUs whose MIG mode is currently enabled."""
    found = []
    for index, device in _devices(options):
        mode = _mig_mode(device)
        if mode and mode[0]:
            found.append((index, device))
    if not found:
        raise SmiError("No MIG-enabled devices found.", EXIT_NOT_FOUND)
    return found


def _mig_mode(device: Any) -> tuple[bool, bool] | None:
    try:
        current, pending = pynvml.nvmlDeviceGetMigMode(device)
    except pynvml.NVMLError_NotSupported:
        return None
    return bool(current), bool(pending)


def _bus_id(device: Any) -> str:
    return pynvml.nvmlDeviceGetPciInfo(device).busId


# -- GPUs ----------------------------------------------------------------------------------


def _list_gpus(path: str, options: argparse.Namespace) -> int:
    for index, device in _devices(options):
        name = pynvml.nvmlDeviceGetName(device)
        print(f"GPU {index}: {name} (UUID: {pynvml.nvmlDeviceGetUUID(device)})")
        mode = _mig_mode(device)
        if not mode or not mode[0]:
            continue
        for position in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(device)):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(device, position)
            except pynvml.NVMLError_NotFound:
                break
            mig_name = pynvml.nvmlDeviceGetName(mig).removeprefix(f"{name} ")
            print(f"  {mig_name:<16}Device {position:2d}: (UUID: {pynvml.nvmlDeviceGetUUID(mig)})")
    return EXIT_OK


_QUERY_FIELDS: dict[str, tuple[str, Callable[[int, Any], str]]] = {
    "index": ("", lambda index, device: str(index)),
    "name": ("", lambda index, device: pynvml.nvmlDeviceGetName(device)),
    "uuid": ("", lambda index, device: pynvml.nvmlDeviceGetUUID(device)),
    "driver_version": ("", lambda index, device: pynvml.nvmlSystemGetDriverVersion()),
    "memory.total": (
        "MiB",
        lambda index, device: str(pynvml.nvmlDeviceGetMemoryInfo(device).total >> 20),
    ),
    "mig.mode.current": ("", lambda index, device: _mode_text(device, 0)),
    "mig.mode.pending": ("", lambda index, device: _mode_text(device, 1)),
    "pci.bus_id": ("", lambda index, device: _bus_id(device)),
}


def _mode_text(device: Any, which: int) -> str:
    mode = _mig_mode(device)
    if mode is None:
        return "[N/A]"
    return "Enabled" if mode[which] else "Disabled"


def _query_gpu(path: str, options: argparse.Namespace) -> int:
    fields = [field.strip() for field in options.query_gpu.split(",")]
    for field in fields:
        if field not in _QUERY_FIELDS:
            raise SmiError(f'Field "{field}" is not a valid field to query.', EXIT_ARGUMENT)
    formats = [part.strip() for part in (options.format or "").split(",")]
    if "csv" not in formats or not set(formats) <= {"csv", "noheader", "nounits"}:
        raise SmiError("--query-gpu needs --format=csv[,noheader][,nounits]", EXIT_ARGUMENT)
    units = "nounits" not in formats
    if "noheader" not in formats:
        print(
            ", ".join(
                f"{f} [{_QUERY_FIELDS[f][0]}]" if units and _QUERY_FIELDS[f][0] else f
                for f in fields
            )
        )
    for index, device in _devices(options):
        values = []
        for field in fields:
            unit, read = _QUERY_FIELDS[field]
            value = read(index, device)
            values.append(f"{value} {unit}" if units and unit else value)
        print(", ".join(values))
    return EXIT_OK


def _set_mig_mode(path: str, options: argparse.Namespace) -> int:
    enable = options.multi_instance_gpu == "1"
    verb, state = ("Enabled", "enable") if enable else ("Disabled", "disable")
    code = EXIT_OK
    for _, device in _devices(options):
        bus = _bus_id(device)
        try:
            status = pynvml.nvmlDeviceSetMigMode(device, int(enable))
        except pynvml.NVMLError as e:
            print(f"Unable to {state} MIG Mode for GPU {bus}: {e}")
            code = _exit_code(e)
            continue
        print(f"{verb} MIG Mode for GPU {bus}")
        if status == pynvml.NVML_ERROR_IN_USE:
            print(
                f"Warning: MIG mode is in pending {state} state for GPU {bus}:"
                f"{pynvml.nvmlErrorString(status)}\n{bus} is currently being used by one or "
                "more other processes (e.g. CUDA application or a monitoring application such "
                "as another instance of nvidia-smi). Please first kill all processes using the "
                "device and retry the command or reboot the system to make MIG mode effective."
            )
        elif status != pynvml.NVML_SUCCESS:
            print(
                f"Warning: MIG mode is in pending {state} state for GPU {bus}:"
                f"{pynvml.nvmlErrorString(status)}\nReset the GPU (nvidia-smi -r) or reboot "
                "the system to make MIG mode effective."
            )
    print("All done.")
    return code


def _reset(path: str, options: argparse.Namespace) -> int:
    targets = [(index, _bus_id(device)) for index, device in _devices(options)]
    refused = []
    with sim_state.transaction(path) as current:
        for index, bus in targets:
            reason = sim_state.reset_gpu(current, index)
            if reason:
                refused.append(f"  GPU {bus}: {reason}")
            else:
                print(f"GPU {bus} was successfully reset.")
    if not refused:
        return EXIT_OK
    many = len(refused) > 1
    print("The following GPUs could not be reset:")
    print("\n".join(refused))
    print()
    print(
        f"{len(refused)} {'devices are' if many else 'device is'} "
        + _IN_USE_HINT.format(this="these devices" if many else "this device")
    )
    return EXIT_OTHER


# -- MIG profiles --------------------------------------------------------------------------


def _gi_profiles(device: Any) -> list[Any]:
    """The GI profiles of ``device`` (NVML_GPU_INSTANCE_PROFILE_* walk), in ``-lgip`` order."""
    found = []
    for const in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            found.append(pynvml.nvmlDeviceGetGpuInstanceProfileInfo(device, const))
        except pynvml.NVMLError as e:
            if e.value not in NVML_PROFILE_ABSENT:
                raise
    return sorted(found, key=lambda p: (p.sliceCount, p.memorySizeMB, p.id))


def _table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    rule = "+" + "-" * (len(headers[0]) - 2) + "+"
    print(rule)
    print(f"| {title:<{len(headers[0]) - 4}} |")
    for header in headers:
        print(header)
    print("|" + "=" * (len(headers[0]) - 2) + "|")
    for row in rows:
        for line in row:
            print(line)
        print(rule)


def _list_profiles(path: str, options: argparse.Namespace) -> int:
    rows = []
    for index, device in _mig_devices(options):
        for p in _gi_profiles(device):
            free = pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(device, p.id)
            rows.append(
                (
                    f"|{index:>4}  {p.name:<18}{p.id:>2}{f'{free}/{p.instanceCount}':>8}{'':8}"
                    f"{p.memorySizeMB / 1024:<11.2f}{'Yes' if p.isP2pSupported else 'No':<2}"
                    f"{p.multiprocessorCount:>7}{p.decoderCount:>6}{p.encoderCount:>6}   |",
                    f"|{'':60}{p.copyEngineCount:>2}{p.jpegCount:>6}{p.ofaCount:>6}   |",
                )
            )
    _table(
        "GPU instance profiles:",
        [
            "| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |",
            "|                              Free/Total   GiB              CE    JPEG  OFA  |",
        ],
        rows,
    )
    return EXIT_OK


def _placements(device: Any, profile_id: int) -> list[tuple[int, int]]:
    count = ctypes.c_uint()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(device, profile_id, None, ctypes.byref(count))
    array = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(
        device, profile_id, array, ctypes.byref(count)
    )
    return [(p.start, p.size) for p in array[: count.value]]


def _list_placements(path: str, options: argparse.Namespace) -> int:
    for index, device in _mig_devices(options):
        for p in _gi_profiles(device):
            placements = _placements(device, p.id)
            starts = ",".join(str(start) for start, _ in placements)
            plural = "s" if len(placements) > 1 else " "
            print(
                f"GPU {index:2d} Profile ID {p.id:2d} Placement{plural}: "
                f"{{{starts}}}:{placements[0][1]}"
            )
    return EXIT_OK


# -- GPU instances -------------------------------------------------------------------------


def _gpu_instances(device: Any) -> list[tuple[Any, Any]]:
    """(handle, info) of every GI on ``device``, walking the GI profiles as mig-parted does."""
    found = []
    for profile in _gi_profiles(device):
        array = (pynvml.c_nvmlGpuInstance_t * profile.instanceCount)()
        count = ctypes.c_uint(profile.instanceCount)
        pynvml.nvmlDeviceGetGpuInstances(device, profile.id, array, ctypes.byref(count))
        found += [(gi, pynvml.nvmlGpuInstanceGetInfo(gi)) for gi in array[: count.value]]
    return sorted(found, key=lambda item: item[1].id)


def _selected_gpu_instances(
    index: int,
    device: Any,
    options: argparse.Namespace,
) -> list[tuple[Any, Any]]:
    """The GIs ``-gi`` names on GPU ``index``, all of them without ``-gi``."""
    wanted = _numbers(options.gpu_instance_id, "GPU instance id")
    if wanted is None:
        return _gpu_instances(device)
    selected = []
    for gi_id in wanted:
        try:
            gi = pynvml.nvmlDeviceGetGpuInstanceById(device, gi_id)
        except pynvml.NVMLError as e:
            raise SmiError(
                f"Unable to find GPU instance ID {gi_id:2d} on GPU {index:2d}: {e}", _exit_code(e)
            ) from None
        selected.append((gi, pynvml.nvmlGpuInstanceGetInfo(gi)))
    return selected


def _profile_name(device: Any, profile_id: int) -> str:
    return pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(device, profile_id).name


def _list_gpu_instances(path: str, options: argparse.Namespace) -> int:
    rows = []
    for index, device in _mig_devices(options):
        for _, info in _selected_gpu_instances(index, device, options):
            where = f"{info.placement.start}:{info.placement.size}"
            rows.append(
                (
                    f"|{index:>4}  {_profile_name(device, info.profileId):<18}"
                    f"{info.profileId:>4}{info.id:>9}{where:>13}     |",
                )
            )
    if not rows:
        raise SmiError("No GPU instances found: Not Found", EXIT_NOT_FOUND)
    _table(
        "GPU instances:",
        [
            "| GPU   Name             Profile  Instance   Placement  |",
            "|                          ID       ID       Start:Size |",
        ],
        rows,
    )
    return EXIT_OK


def _profile_token(device: Any, token: str) -> Any:
    """The GI profile info a ``-cgi`` item names: an id, ``3g.40gb`` or ``MIG 3g.40gb``."""
    if token.isdigit():
        return pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(device, int(token))
    for profile in _gi_profiles(device):
        if token in (profile.name, profile.name.removeprefix("MIG ")):
            return profile
    raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)


def _create_gpu_instances(path: str, options: argparse.Namespace) -> int:
    for index, device in _mig_devices(options):
        for item in options.create_gpu_instance.split(","):
            token, _, start = item.strip().partition(":")
            try:
                profile = _profile_token(device, token)
                if start:
                    gi = _create_at(device, profile.id, int(start))
                else:
                    gi = pynvml.nvmlDeviceCreateGpuInstance(device, profile.id)
            except (pynvml.NVMLError, ValueError) as e:
                error = (
                    e
                    if isinstance(e, pynvml.NVMLError)
                    else pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
                )
                print(
                    f"Unable to create a GPU instance on GPU {index:2d} using profile "
                    f"{item.strip()}: {error}\nFailed to create GPU instances: {error}"
                )
                return _exit_code(error)
            gi_id = pynvml.nvmlGpuInstanceGetInfo(gi).id
            print(
                f"Successfully created GPU instance ID {gi_id:2d} on GPU {index:2d} using "
                f"profile {profile.name} (ID {profile.id:2d})"
            )
            if options.default_compute_instance:
                code = _create_ci(index, gi, gi_id, None)
                if code:
                    return code
    return EXIT_OK


def _create_at(device: Any, profile_id: int, start: int) -> Any:
    placements = _placements(device, profile_id)
    size = next((z for s, z in placements if s == start), placements[0][1])
    placement = pynvml.c_nvmlGpuInstancePlacement_t(start, size)
    return pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(
        device, profile_id, ctypes.byref(placement)
    )


# -- compute instances ---------------------------------------------------------------------


def _ci_profiles(gi: Any) -> list[Any]:
    found = []
    for const in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        try:
            found.append(
                pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gi, const, pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
                )
            )
        except pynvml.NVMLError as e:
            if e.value not in NVML_PROFILE_ABSENT:
                raise
    return found


def _compute_instances(gi: Any) -> list[tuple[Any, Any, Any]]:
    """(handle, info, profile info) of every CI in ``gi``, by CI id."""
    found = []
    for profile in _ci_profiles(gi):
        array = (pynvml.c_nvmlComputeInstance_t * profile.instanceCount)()
        count = ctypes.c_uint(profile.instanceCount)
        pynvml.nvmlGpuInstanceGetComputeInstances(gi, profile.id, array, ctypes.byref(count))
        found += [
            (ci, pynvml.nvmlComputeInstanceGetInfo(ci), profile) for ci in array[: count.value]
        ]
    return sorted(found, key=lambda item: item[1].id)


def _create_ci(index: int, gi: Any, gi_id: int, profile_id: int | None) -> int:
    """Create one CI in ``gi``: profile ``profile_id``, or the one spanning the whole GI."""
    try:
        profiles = _ci_profiles(gi)
        if profile_id is None:
            profile = max(profiles, key=lambda p: p.sliceCount)
        else:
            profile = next((p for p in profiles if p.id == profile_id), None)
            if profile is None:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, profile.id)
    except pynvml.NVMLError as e:
        print(
            f"Unable to create a compute instance on GPU {index:2d} GPU instance ID "
            f"{gi_id:2d}: {e}\nFailed to create compute instances: {e}"
        )
        return _exit_code(e)
    ci_id = pynvml.nvmlComputeInstanceGetInfo(ci).id
    print(
        f"Successfully created compute instance ID {ci_id:2d} on GPU {index:2d} GPU instance "
        f"ID {gi_id:2d} using profile {profile.name} (ID {profile.id:2d})"
    )
    return EXIT_OK


def _create_compute_instances(path: str, options: argparse.Namespace) -> int:
    profiles = _numbers(options.create_compute_instance or None, "compute instance profile")
    for index, device in _mig_devices(options):
        for gi, info in _selected_gpu_instances(index, device, options):
            for profile_id in profiles or [None]:
                code = _create_ci(index, gi, info.id, profile_id)
                if code:
                    return code
    return EXIT_OK


def _list_compute_instances(path: str, options: argparse.Namespace) -> int:
    rows = []
    for index, device in _mig_devices(options):
        for gi, info in _selected_gpu_instances(index, device, options):
            for _, ci, profile in _compute_instances(gi):
                where = f"{ci.placement.start}:{ci.placement.size}"
                rows.append(
                    (
                        f"|{index:>4}{info.id:>7}       {profile.name:<19}"
                        f"{profile.id:>3}{ci.id:>10}{where:>13}     |",
                    )
                )
    if not rows:
        raise SmiError("No compute instances found: Not Found", EXIT_NOT_FOUND)
    _table(
        "Compute instances:",
        [
            "| GPU     GPU       Name             Profile   Instance   Placement  |",
            "|       Instance                       ID        ID       Start:Size |",
            "|         ID                                                         |",
        ],
        rows,
    )
    return EXIT_OK


def _destroy_compute_instances(path: str, options: argparse.Namespace) -> int:
    wanted = _numbers(options.compute_instance_id, "compute instance id")
    code, found = EXIT_OK, False
    for index, device in _mig_devices(options):
        for gi, info in _selected_gpu_instances(index, device, options):
            for ci, ci_info, _ in _compute_instances(gi):
                if wanted is not None and ci_info.id not in wanted:
                    continue
                found = True
                try:
                    pynvml.nvmlComputeInstanceDestroy(ci)
                except pynvml.NVMLError as e:
                    print(
                        f"Unable to destroy compute instance ID {ci_info.id:2d} from GPU "
                        f"{index:2d} GPU instance ID {info.id:2d}: {e}\n"
                        f"Failed to destroy compute instances: {e}"
                    )
                    code = _exit_code(e)
                    continue
                print(
                    f"Successfully destroyed compute instance ID {ci_info.id:2d} from GPU "
                    f"{index:2d} GPU instance ID {info.id:2d}"
                )
    if not found:
        raise SmiError("No compute instances found: Not Found", EXIT_NOT_FOUND)
    return code


def _destroy_gpu_instances(path: str, options: argparse.Namespace) -> int:
    code, found = EXIT_OK, False
    for index, device in _mig_devices(options):
        for gi, info in _selected_gpu_instances(index, device, options):
            found = True
            try:
                pynvml.nvmlGpuInstanceDestroy(gi)
            except pynvml.NVMLError as e:
                print(
                    f"Unable to destroy GPU instance ID {info.id:2d} from GPU {index:2d}: {e}"
                    f"\nFailed to destroy GPU instances: {e}"
                )
                code = _exit_code(e)
                continue
            print(f"Successfully destroyed GPU instance ID {info.id:2d} from GPU {index:2d}")
    if not found:
        raise SmiError("No GPU instances found: Not Found", EXIT_NOT_FOUND)
    return code


def run() -> None:
    """Console-script entry point (``gpuprov-sim-nvidia-smi``)."""
    sys.exit(main())


if __name__ == "__main__":
    run()
