"""A MIG layout against this host's GPUs, by the driver's own rules, before anything changes.

The layout file's shape and the rules that need no GPU (one entry per GPU, no two instances on
one memory slot) are checked when it is parsed (``gpuprov/core/hostfiles/mig_layout.py``). The rest
depend on the GPU model, so they are asked of NVML, the authority the planner's catalog was
compiled from: every GPU instance profile the GPU has (``nvmlDeviceGetGpuInstanceProfileInfo``,
its id, name, compute slices and maximum count) and where each may sit
(``nvmlDeviceGetGpuInstancePossiblePlacements_v2``, answered "regardless of whether MIG is
enabled or not", NVML API reference). A layout is refused when a planned instance names a
profile this GPU does not have, a name that is not its id's, a placement not allowed for it, more
instances of a profile than the GPU allows, or more compute slices than the GPU has.

>>> problems(layout)                                   # doctest: +SKIP
['GPU 0: profile id 99 (3g.40gb) does not exist on this GPU (NVIDIA A100-SXM4-80GB); it has ...']
"""

from __future__ import annotations

import ctypes
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pynvml

from gpuprov.host.contract import NVML_PROFILE_ABSENT
from gpuprov.host.mig.layout import GpuLayout, MigLayout, slots_text


@dataclass(frozen=True)
class GiProfile:
    """A GPU instance profile as NVML describes it on one GPU."""

    id: int
    name: str
    compute_slices: int
    max_instances: int
    placements: frozenset[tuple[int, int]]


def problems(layout: MigLayout) -> list[str]:
    """What in ``layout`` this host's GPUs cannot do, one line each; [] when it can be applied.

    NVML must be initialized. Reads only: nothing on the GPUs changes.
    """
    count = pynvml.nvmlDeviceGetCount()
    found = []
    for gpu in layout.gpus:
        if gpu.index >= count:
            found.append(f"GPU {gpu.index}: the host has {count} GPU(s) (0-{count - 1})")
        elif gpu.mig_enabled:
            found += _gpu_problems(gpu, pynvml.nvmlDeviceGetHandleByIndex(gpu.index))
    return found


def gpu_profiles(device: Any) -> dict[int, GiProfile]:
    """Every GPU instance profile of ``device``, by NVML profile id ({} without MIG)."""
    out = {}
    for const in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(device, const)
        except pynvml.NVMLError as e:
            if e.value in NVML_PROFILE_ABSENT:
                continue
            raise
        out[info.id] = GiProfile(
            id=info.id,
            name=_text(info.name).removeprefix("MIG "),
            compute_slices=info.sliceCount,
            max_instances=info.instanceCount,
            placements=_placements(device, info.id),
        )
    return out


def _gpu_problems(gpu: GpuLayout, device: Any) -> list[str]:
    where = f"GPU {gpu.index}"
    try:
        pynvml.nvmlDeviceGetMigMode(device)
    except pynvml.NVMLError_NotSupported:
        return [
            f"{where}: not MIG capable ({_text(pynvml.nvmlDeviceGetName(device))}), "
            "but the layout enables MIG on it"
        ]
    profiles = gpu_profiles(device)
    if not profiles:
        return [f"{where}: NVML lists no GPU instance profiles, so MIG cannot be planned on it"]
    found = []
    known = ", ".join(
        f"{p.name} (id {p.id})" for p in sorted(profiles.values(), key=lambda p: p.id)
    )
    counts: Counter[int] = Counter()
    slices = 0
    for instance in gpu.instances:
        profile = profiles.get(instance.profile_id)
        shown = f"{instance.profile} (id {instance.profile_id})"
        if profile is None:
            found.append(
                f"{where}: {shown}: this GPU ({_text(pynvml.nvmlDeviceGetName(device))}) has no "
                f"profile id {instance.profile_id}; it has {known}"
            )
            continue
        if profile.name != instance.profile:
            found.append(
                f"{where}: {shown}: profile id {profile.id} is {profile.name} on this GPU, "
                f"not {instance.profile}"
            )
        if (instance.start, instance.size) not in profile.placements:
            allowed = ", ".join(slots_text(s, n) for s, n in sorted(profile.placements))
            found.append(
                f"{where}: {shown} cannot sit at {slots_text(instance.start, instance.size)}; "
                f"its placements are {allowed}"
            )
        counts[profile.id] += 1
        slices += profile.compute_slices
    for profile_id, n in sorted(counts.items()):
        profile = profiles[profile_id]
        if n > profile.max_instances:
            found.append(
                f"{where}: {n} instances of {profile.name}; this GPU allows at most "
                f"{profile.max_instances}"
            )
    total = max(p.compute_slices for p in profiles.values())
    if slices > total:
        found.append(f"{where}: the instances need {slices} compute slices; this GPU has {total}")
    return found


def _placements(device: Any, profile_id: int) -> frozenset[tuple[int, int]]:
    # A NULL array asks only for the count (NVML API reference), then the array is filled.
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(device, profile_id, None, ctypes.byref(count))
    array = (pynvml.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(
        device, profile_id, array, ctypes.byref(count)
    )
    return frozenset((p.start, p.size) for p in array[: count.value])


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
