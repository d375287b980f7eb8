"""Re-grouping: what a host's previous mode left behind goes before the new mode is applied.

A host that left ``mig`` loses its layout file and its boot unit (so no later boot re-creates
instances); its MIG instances and mode are then turned off by the ``MIG off`` step. A stale
time-slicing config is replaced or removed by the device plugin step.
"""

from __future__ import annotations

from pyinfra.api import deploy

from gpuprov.deploys.mig import LAYOUT, UNIT, UNIT_PATH
from gpuprov.deploys.view import HostView, Watch, ensure_file
from gpuprov.operations.units import absent


def watch(mode: str) -> Watch:
    return Watch() if mode == "mig" else Watch(paths=(LAYOUT, UNIT_PATH), units=(UNIT,))


@deploy("Leftovers of a previous mode")
def leftovers(view: HostView) -> None:
    if view.plan.mode == "mig":
        return
    unit = view.units.get(UNIT, {})
    if view.files.get(UNIT_PATH) is not None or unit.get("enabled") not in (None, "", "not-found"):
        absent(name=f"{UNIT} gone (host left mig)", unit=UNIT, path=UNIT_PATH)
    ensure_file(view, f"{LAYOUT} gone (host left mig)", LAYOUT, present=False)
