"""The host-side MIG applier: make the GPUs match ``/etc/gpuprov/mig-layout.json``.

Runs on the host inside the agent bundle (stdlib + pynvml only), from the deploy and at boot
(``gpuprov-mig.service``: ``apply --boot``). One NVML session per run. The steps, per the diff of
``gpuprov/host/mig/diff.py``:

0. check the layout against the GPUs by NVML's own rules (``rules.py``); a layout they cannot
   take is refused (exit 2) before anything changes, also under ``--check`` and ``--boot``;
1. destroy the GIs the diff names (their CIs first) and set the MIG mode where it differs;
2. create the planned GIs, at their exact placements, on the GPUs whose mode is already right;
   When a GPU's MIG mode must change (a reset follows), first: the active units of
   ``gpu_clients`` are stopped (started again, in reverse, when the run ends, whatever its
   outcome); then every process still holding ``/dev/nvidia*`` and a loaded ``nvidia_drm``
   (``gpu_holders.py``) block the reset: the run fails naming each holder (pid, command, unit or
   container) before anything changes, or, with ``allow_reboot``, a reboot is reported (exit 3);
3. reset only the GPUs whose mode change is pending; if the reset is refused, a reboot is
   reported when ``allow_reboot`` (exit 3), else it fails;
4. re-read the reset GPUs and create their GIs.

A GPU that already matches is not touched. When NVML fails midway the run stops, reports what it
did and exits 1; the next run converges because the diff destroys any half-built GI.

>>> run(load("/etc/gpuprov/mig-layout.json"))               # doctest: +SKIP
(0, {'changed': False, 'reboot_required': False, ...})
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pynvml

from gpuprov.host import gpu_holders
from gpuprov.host.contract import (
    AGENT_EXIT_BAD_INPUT,
    AGENT_EXIT_FAILED,
    AGENT_EXIT_OK,
    AGENT_EXIT_REBOOT,
    MIG_APPLY_LOCK,
)
from gpuprov.host.gpu_clients import DRM_BLOCKS, Holder, blocked_message, blocking
from gpuprov.host.mig import nvml_instances, rules
from gpuprov.host.mig.diff import MigActions, MigDiffError, diff
from gpuprov.host.mig.layout import MigLayout
from gpuprov.host.mig.reset import ClientsError, clients_stopped, reset

# One way into NVML for probe and applier.
from gpuprov.host.nvml_gpus import read_gpu


class ApplyFailed(Exception):
    """A step failed; the message says which GPU and what was being done."""


@dataclass
class GpuReport:
    """What happened to one GPU: ``actions`` in the order done, ``kept`` GIs left untouched."""

    index: int
    actions: list[dict[str, Any]] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "actions": self.actions, "kept": self.kept}


@dataclass
class Report:
    """The JSON document ``apply`` prints (docs/architecture.md, "apply report")."""

    gpus: dict[int, GpuReport]
    check: bool
    reboot_required: bool = False
    reboot_reason: str | None = None
    stopped_units: tuple[str, ...] = ()
    holders: tuple[Holder, ...] = ()  # the processes that kept a reset from happening
    error: str | None = None
    refused: list[str] = field(default_factory=list)  # why the layout cannot be applied here

    @property
    def changed(self) -> bool:
        return any(g.actions for g in self.gpus.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "changed": self.changed,
            "reboot_required": self.reboot_required,
            "reboot_reason": self.reboot_reason,
            "check": self.check,
            "error": self.error,
            "refused": self.refused,
            "stopped_units": list(self.stopped_units),
            "holders": [
                {"pid": h.pid, "command": h.command, "unit": h.unit, "container": h.container}
                for h in self.holders
            ],
            "gpus": [g.as_dict() for g in self.gpus.values()],
        }


def run(
    layout: MigLayout,
    *,
    boot: bool = False,
    check: bool = False,
    system: gpu_holders.System = gpu_holders.THIS_HOST,
) -> tuple[int, dict]:
    """Apply ``layout`` (or only report what would change, with ``check``).

    Returns the exit code and the report: 0 done, 1 failed, 2 refused (the layout breaks the
    driver's MIG rules for these GPUs; nothing was changed), 3 a reboot is required and allowed
    (never from ``boot``, which is what runs after that reboot). ``system`` is where the GPU
    holders are read (``/proc``, ``/sys``).
    """
    report = Report({g.index: GpuReport(g.index) for g in layout.gpus}, check)
    with _exclusive(MIG_APPLY_LOCK):
        return _run_locked(layout, report, boot, system)


def _run_locked(
    layout: MigLayout, report: Report, boot: bool, system: gpu_holders.System
) -> tuple[int, dict]:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        report.error = f"NVML: {e}"
        return AGENT_EXIT_FAILED, report.as_dict()
    try:
        code = _Applier(layout, report, boot, system).run()
    except (ApplyFailed, ClientsError) as e:
        report.error = str(e)
        code = AGENT_EXIT_FAILED
    finally:
        # What was done is done; a failing shutdown changes nothing the report says.
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    return code, report.as_dict()


@contextlib.contextmanager
def _exclusive(path: str) -> Iterator[None]:
    """One applier at a time per host: the deploy's run and the boot unit's must not interleave
    their destroy/create calls."""
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class _Applier:
    def __init__(self, layout: MigLayout, report: Report, boot: bool, system: gpu_holders.System):
        self.layout = layout
        self.report = report
        self.boot = boot
        self.system = system
        self.planned = {g.index: g for g in layout.gpus}

    def run(self) -> int:
        # The driver's rules first, for --check, --boot and a real apply alike: a layout this
        # host cannot take is refused before any instance is destroyed.
        self.report.refused = self._nvml(
            "check the layout against the GPUs", rules.problems, self.layout
        )
        if self.report.refused:
            return AGENT_EXIT_BAD_INPUT
        actions = {i: self._diff(i) for i in self.planned}
        for i, a in actions.items():
            self.report.gpus[i].kept = [gi.as_dict() for gi in a.keep]
        if self.report.check:
            for i, a in actions.items():
                self._record_check(i, a)
            return AGENT_EXIT_OK
        pending = [i for i, a in actions.items() if a.reset]
        if not pending:
            return self._change(actions, pending, blocked=None)
        # A mode change: the GPUs' clients stay stopped from before the first change to after
        # the last instance is created, so none sees a half-built layout.
        with clients_stopped(self.layout.gpu_clients) as stopped:
            self.report.stopped_units = stopped
            return self._change(actions, pending, self._blocked(pending, stopped))

    def _blocked(self, pending: list[int], stopped: tuple[str, ...]) -> str | None:
        """Why a reset of ``pending`` cannot succeed now (None: nothing blocks it). Without a
        reboot to fall back on, that fails the run here, before any GPU changes."""
        gpus = ", ".join(map(str, pending))
        if gpu_holders.drm_loaded(self.system):
            why = f"GPU {gpus}: not reset: {DRM_BLOCKS}"
        else:
            held = blocking(gpu_holders.holders(self.system), own_pids={os.getpid()})
            self.report.holders = tuple(held)
            why = blocked_message(gpus, held, stopped) if held else None
        if why and not (self.layout.allow_reboot and not self.boot):
            raise ApplyFailed(f"{why}; nothing was changed")
        return why

    def _change(
        self, actions: dict[int, MigActions], pending: list[int], blocked: str | None
    ) -> int:
        for i, a in actions.items():
            self._destroy(i, a)
            if a.mig_mode is not None:
                self._set_mode(i, a.mig_mode)
        for i, a in actions.items():
            if not a.reset:
                self._create(i, a)
        if not pending:
            return AGENT_EXIT_OK
        if blocked:
            self.report.reboot_required = True
            self.report.reboot_reason = f"{blocked}; a reboot applies the MIG mode"
            return AGENT_EXIT_REBOOT
        if not self._reset(pending):
            return AGENT_EXIT_REBOOT
        for i in pending:
            after = self._diff(i)
            if after.reset:
                raise ApplyFailed(
                    f"GPU {i}: MIG mode is still "
                    f"{'enabled' if self.planned[i].mig_enabled else 'disabled'}"
                    " after the reset"
                )
            self._destroy(i, after)
            self._create(i, after)
        return AGENT_EXIT_OK

    def _device(self, index: int) -> Any:
        # Looked up afresh each time: a reset may invalidate handles taken before it.
        return self._nvml(f"GPU {index}: get its handle", pynvml.nvmlDeviceGetHandleByIndex, index)

    def _diff(self, index: int) -> MigActions:
        observed = self._nvml(f"GPU {index}: read its MIG state", read_gpu, index)
        try:
            return diff(self.planned[index], observed)
        except MigDiffError as e:
            raise ApplyFailed(str(e)) from None

    def _record_check(self, index: int, actions: MigActions) -> None:
        record = self.report.gpus[index].actions
        record.extend({"action": "destroy", **gi.as_dict()} for gi in actions.destroy)
        if actions.mig_mode is not None:
            record.append({"action": "set-mig-mode", "enabled": actions.mig_mode})
        if actions.reset:
            record.append({"action": "reset"})
        record.extend(
            {"action": "create", "gi": None, "ci": None, **t.as_dict()} for t in actions.create
        )

    def _destroy(self, index: int, actions: MigActions) -> None:
        for gi in actions.destroy:
            self._nvml(
                f"GPU {index}: destroy GI {gi.id}",
                nvml_instances.destroy,
                self._device(index),
                gi.id,
            )
            self.report.gpus[index].actions.append({"action": "destroy", **gi.as_dict()})

    def _set_mode(self, index: int, enabled: bool) -> None:
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if enabled else pynvml.NVML_DEVICE_MIG_DISABLE
        self._nvml(
            f"GPU {index}: set MIG mode {'on' if enabled else 'off'}",
            pynvml.nvmlDeviceSetMigMode,
            self._device(index),
            mode,
        )
        self.report.gpus[index].actions.append({"action": "set-mig-mode", "enabled": enabled})

    def _create(self, index: int, actions: MigActions) -> None:
        for target in actions.create:
            where = f"GPU {index}: create {target.profile} at {target.start}:{target.size}"
            gi = self._nvml(where, nvml_instances.create_gpu_instance, self._device(index), target)
            record = {
                "action": "create",
                "gi": self._nvml(where, nvml_instances.gpu_instance_id, gi),
                "ci": None,
                **target.as_dict(),
            }
            # Recorded before its CI: if the CI fails, the report still names the half-built GI.
            self.report.gpus[index].actions.append(record)
            record["ci"] = self._nvml(
                f"{where}: its compute instance",
                nvml_instances.create_full_compute_instance,
                gi,
                target.compute_slices,
            )

    def _reset(self, indices: list[int]) -> bool:
        """Reset ``indices``; False when a reboot must finish the job instead."""
        ok, message = reset(indices)
        if ok:
            for i in indices:
                self.report.gpus[i].actions.append({"action": "reset"})
            return True
        gpus = ", ".join(map(str, indices))
        if self.layout.allow_reboot and not self.boot:
            self.report.reboot_required = True
            self.report.reboot_reason = (
                f"GPU {gpus}: the reset was refused ({message}); a reboot applies the MIG mode"
            )
            return False
        hint = (
            "stop the processes using the GPU"
            if self.boot
            else "stop the processes using the GPU, list their units in gpu_clients, "
            "or allow a reboot with mig_reboot: true"
        )
        raise ApplyFailed(f"GPU {gpus}: cannot reset to apply the MIG mode: {message}; {hint}")

    def _nvml(self, what: str, function: Any, *args: Any) -> Any:
        try:
            return function(*args)
        except (pynvml.NVMLError, nvml_instances.InstanceError) as e:
            raise ApplyFailed(f"{what}: {e}") from None
