"""The GPUs a probe saw against the plan: NVML state, GPU count and model, driver version, and per
GPU the MIG mode and the exact instances.

MIG instances are compared by exact placement through the same ``gpuprov.host.mig.diff`` the host-side
applier uses, so "verify says ok" and "apply has nothing to do" are one rule. GPUs are matched by
their index, which ``gpuprov.core.checks.probe_document`` has already checked (unique integers 0..N-1, unique
UUIDs and PCI bus ids): a GPU is never skipped because its index is odd.

>>> [f.check for f in check(plan, probe)]                  # doctest: +SKIP
['mig-mode']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuprov.core import catalog
from gpuprov.core.checks.probe_document import ProbeDocument
from gpuprov.core.findings import Finding
from gpuprov.core.hostfiles.documents import Report, one_line
from gpuprov.core.plan import GpuPlan, HostPlan
from gpuprov.host.contract import NVIDIA_DEVICE_PREFIX, PROBE_NVML_OK
from gpuprov.host.mig.diff import MigDiffError, ObservedGi, diff
from gpuprov.host.mig.instance import Instance


def check(plan: HostPlan, probe: ProbeDocument) -> list[Finding]:
    """Every way the host's GPUs differ from ``plan``; [] when they match."""
    report = Report(plan.name)
    if not _nvml_ok(report, plan, probe):
        return report.findings
    _hardware(report, plan, probe)
    if plan.driver.driver_version and probe.driver_version != plan.driver.driver_version:
        report.add(
            "driver-version",
            plan.driver.driver_version,
            str(probe.driver_version),
            "run the deploy (a driver change may need a reboot: driver_reboot)",
        )
    observed = {gpu["index"]: gpu for gpu in probe.gpus}
    for gpu in plan.gpus:
        if gpu.index in observed:  # else the hardware check names the missing GPU
            _gpu(report, plan, gpu, observed[gpu.index])
    return report.findings


def _nvml_ok(report: Report, plan: HostPlan, probe: ProbeDocument) -> bool:
    state = probe.nvml
    if state == PROBE_NVML_OK:
        return True
    driver = plan.driver.driver_version
    hints = {
        "library-not-found": f"run the deploy (it installs driver {driver})"
        if driver
        else "install the NVIDIA driver, or set driver_version to let the deploy do it",
        "driver-not-loaded": "load the nvidia kernel module (modprobe nvidia) or reboot "
        "after the driver install",
        "no-permission": f"connect as root (or give the SSH user access to {NVIDIA_DEVICE_PREFIX}*)",
    }
    found = state if not probe.error else f"{state}: {one_line(probe.error)[:200]}"
    report.add(
        "nvml", "ok", found, hints.get(state, "run nvidia-smi on the host to see why NVML fails")
    )
    return False


def _hardware(report: Report, plan: HostPlan, probe: ProbeDocument) -> None:
    if len(probe.gpus) != plan.gpu_count:
        report.add(
            "hardware",
            _count(plan.gpu_count),
            _count(len(probe.gpus)),
            "fix gpu_count in the inventory, or check the host (a GPU fell off the bus?)",
        )
    wrong: dict[str, list[int]] = {}
    for gpu in sorted(probe.gpus, key=lambda g: g["index"]):
        model = catalog.find_model(gpu["name"])
        if model is None or model.alias != plan.gpu_model:
            alias = model.alias if model else "not in the catalog"
            wrong.setdefault(f"{one_line(gpu['name'])} ({alias})", []).append(gpu["index"])
    for name, indices in wrong.items():
        report.add(
            "hardware",
            plan.gpu_model,
            f"GPU {', '.join(map(str, indices))}: {name}",
            "fix gpu_model in the inventory, or move the host to the right group",
        )


def _gpu(report: Report, plan: HostPlan, gpu_plan: GpuPlan, observed: Mapping[str, Any]) -> None:
    index = gpu_plan.index
    try:
        actions = diff(gpu_plan, observed)
    except MigDiffError:
        report.add(
            "mig-mode",
            "MIG enabled",
            "not MIG capable",
            f"check gpu_model: GPU {index} cannot run MIG",
            gpu=index,
        )
        return
    mig = observed["mig"] or {"current": False, "pending": False}
    leftover = plan.mode != "mig"
    if actions.reset or actions.mig_mode is not None:
        _mig_mode(report, index, gpu_plan.mig_enabled, mig, actions.reset, leftover)
    if not mig["current"]:
        return  # no instance can exist; a planned one follows the mode change
    if leftover:
        if observed["gpu_instances"]:
            ids = ", ".join(str(g["id"]) for g in observed["gpu_instances"])
            report.add(
                "leftover",
                "no MIG instances",
                f"GI {ids}",
                "run the deploy (it destroys them and disables MIG)",
                gpu=index,
            )
        return
    _instances(report, index, actions.destroy, actions.create)


def _mig_mode(
    report: Report, index: int, want: bool, mig: Mapping[str, Any], reset: bool, leftover: bool
) -> None:
    current, pending = bool(mig["current"]), bool(mig["pending"])
    check = "leftover" if leftover and (current or pending) else "mig-mode"
    expected = f"MIG {_on_off(want)}"
    if reset and pending == want:
        report.add(
            check,
            expected,
            f"MIG {_on_off(current)} (pending {_on_off(pending)})",
            f"reboot or reset GPU {index} to apply the pending MIG mode",
            gpu=index,
        )
    elif reset:
        report.add(check, expected, f"MIG {_on_off(current)}", "run the deploy", gpu=index)
    else:
        report.add(
            check,
            expected,
            f"MIG {_on_off(current)}, pending {_on_off(pending)}",
            f"run the deploy (a reset or reboot now would leave MIG "
            f"{_on_off(pending)} on GPU {index})",
            gpu=index,
        )


def _instances(
    report: Report, index: int, destroy: tuple[ObservedGi, ...], create: tuple[Instance, ...]
) -> None:
    missing = sorted(create, key=lambda t: t.start)
    for gi in destroy:
        same_place = next(
            (
                t
                for t in missing
                if (t.profile_id, t.start, t.size) == (gi.profile_id, gi.start, gi.size)
            ),
            None,
        )
        if same_place is not None:
            # Right GI at the right slots; only its compute instance is wrong.
            missing.remove(same_place)
            report.add(
                "compute-instances",
                f"GI {gi.id}: 1 CI of {same_place.compute_slices} slices",
                f"GI {gi.id}: {_ci_text(gi.ci_slices)}",
                f"run the deploy (it recreates GI {gi.id} with its full compute instance)",
                gpu=index,
            )
            continue
        elsewhere = next((t for t in missing if t.profile_id == gi.profile_id), None)
        if elsewhere is not None:
            missing.remove(elsewhere)
            report.add(
                "gpu-instances",
                _planned_text(elsewhere),
                _observed_text(gi),
                f"run the deploy (it re-creates GI {gi.id} at "
                f"{_slots(elsewhere.start, elsewhere.size)})",
                gpu=index,
            )
        else:
            report.add(
                "gpu-instances",
                f"nothing at {_slots(gi.start, gi.size)}",
                _observed_text(gi),
                f"run the deploy (it destroys GI {gi.id})",
                gpu=index,
            )
    for target in missing:
        report.add(
            "gpu-instances",
            _planned_text(target),
            "missing",
            f"run the deploy (it creates {target.profile} at {_slots(target.start, target.size)})",
            gpu=index,
        )


def _ci_text(slices: tuple[int, ...]) -> str:
    if not slices:
        return "no compute instance"
    if len(slices) == 1:
        return f"1 CI of {slices[0]} slices"
    return f"{len(slices)} CIs of {'+'.join(map(str, slices))} slices"


def _slots(start: int, size: int) -> str:
    """Memory slots as people read them: ``slot 6`` or ``slots 4-7``."""
    return f"slot {start}" if size == 1 else f"slots {start}-{start + size - 1}"


def _planned_text(target: Instance) -> str:
    return f"{target.profile} at {_slots(target.start, target.size)}"


def _observed_text(gi: ObservedGi) -> str:
    profile = one_line(gi.profile) if gi.profile else f"profile {gi.profile_id}"
    return f"GI {gi.id}: {profile} at {_slots(gi.start, gi.size)}"


def _count(count: int) -> str:
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def _on_off(value: Any) -> str:
    return "enabled" if value else "disabled"
