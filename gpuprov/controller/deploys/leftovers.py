"""Re-grouping: what a host's previous mode left behind goes before the new mode is applied.

A host that left ``mig`` loses its layout file and its boot unit (so no later boot re-creates
instances); its MIG instances and mode are then turned off by the ``MIG off`` step. A stale
time-slicing config is replaced or removed by the device plugin step (a ``vgpu`` host has none).
A host that left ``vgpu`` has nothing to lose here: gpuprov writes no vGPU file on the host; its
node config entry and labels go with the next ``gpuprov kube apply``.
"""

from __future__ import annotations

from pyinfra.api import deploy

from gpuprov.controller.deploys.view import HostView, Watch, ensure_file
from gpuprov.controller.operations.units import absent
from gpuprov.host.contract import MIG_LAYOUT_PATH, MIG_UNIT, MIG_UNIT_PATH


def watch(mode: str) -> Watch:
    return (
        Watch()
        if mode == "mig"
        else Watch(paths=(MIG_LAYOUT_PATH, MIG_UNIT_PATH), units=(MIG_UNIT,))
    )


@deploy("Leftovers of a previous mode")
def leftovers(view: HostView) -> None:
    if view.plan.mode == "mig":
        return
    unit = view.units.get(MIG_UNIT, {})
    if view.files.get(MIG_UNIT_PATH) is not None or unit.get("enabled") not in (
        None,
        "",
        "not-found",
    ):
        absent(
            name=f"{MIG_UNIT} gone (host left mig)",
            unit=MIG_UNIT,
            path=MIG_UNIT_PATH,
            _timeout=view.plan.timeouts.gpuprov_timeout_service,
        )
    ensure_file(view, f"{MIG_LAYOUT_PATH} gone (host left mig)", MIG_LAYOUT_PATH, present=False)
