"""MIG: the host agent, the planned layout file, the boot unit that rebuilds it, and the
incremental apply (with the reboot the agent may ask for). Hosts outside ``mig`` get MIG off.

Both steps return the apply operations they scheduled: whatever they change (a layout or the
MIG mode) changes the devices the device plugin advertises, so the device plugin step restarts
the plugin when any of them changed something (``gpuprov.controller.deploys.plugin_config``)."""

from __future__ import annotations

from typing import Any

from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta
from pyinfra.operations import server, systemd

from gpuprov.controller.bundle import build_bundle
from gpuprov.controller.deploys.view import HostView, Watch, changed, ensure_file
from gpuprov.controller.limits import reboot_limit
from gpuprov.controller.operations.mig import applied, differences, reboot_requested
from gpuprov.controller.operations.units import service
from gpuprov.core.hostfiles import mig_layout as layout_file
from gpuprov.core.hostfiles import mig_unit as unit_file
from gpuprov.core.plan import HostPlan
from gpuprov.host.contract import MIG_LAYOUT_PATH, MIG_OFF_PATH, MIG_UNIT, MIG_UNIT_PATH


def document(plan: HostPlan) -> dict[str, Any]:
    """The host's mig-layout.json as a dict (``hostfiles/mig_layout.py``); MIG off outside ``mig``."""
    return layout_file.from_plan(plan).as_dict()


def watch(plan: HostPlan, mode: str) -> Watch:
    out = Watch(paths=(plan.agent.gpuprov_agent_path,))
    if mode == "mig":
        out += Watch(paths=(MIG_LAYOUT_PATH, MIG_UNIT_PATH), units=(MIG_UNIT,))
    return out


def pending_actions(view: HostView):
    """The MIG actions the node needs (None: the probe cannot tell yet)."""
    return differences(document(view.plan), view.probe)


@deploy("gpuprov agent")
def agent(view: HostView) -> None:
    ensure_file(
        view,
        "host agent (probe + MIG applier)",
        view.plan.agent.gpuprov_agent_path,
        build_bundle(),
    )


@deploy("MIG layout")
def mig_layout(view: HostView) -> list[OperationMeta]:
    plan = view.plan
    ensure_file(
        view, f"MIG layout {MIG_LAYOUT_PATH}", MIG_LAYOUT_PATH, layout_file.render(view.plan)
    )
    unit = ensure_file(view, f"boot unit {MIG_UNIT}", MIG_UNIT_PATH, unit_file.render(view.plan))
    if unit:
        systemd.daemon_reload(name="systemd daemon-reload", _if=changed(unit))
    if view.units.get(MIG_UNIT, {}).get("enabled") != "enabled":
        service(
            name=f"{MIG_UNIT} enabled at boot",
            units=[MIG_UNIT],
            running=None,
            _timeout=plan.timeouts.gpuprov_timeout_service,
        )
    return _apply(view, MIG_LAYOUT_PATH, upload=False, reboot=plan.mig.mig_reboot)


@deploy("MIG off")
def mig_off(view: HostView) -> list[OperationMeta]:
    return _apply(view, MIG_OFF_PATH, upload=True, reboot=view.plan.mig.mig_reboot)


def _apply(view: HostView, path: str, upload: bool, reboot: bool) -> list[OperationMeta]:
    """The apply operations scheduled (none when the host state shows the GPUs as planned)."""
    if pending_actions(view) == []:
        return []
    plan = view.plan
    kwargs = dict(
        document=document(view.plan),
        layout_path=path,
        agent_path=plan.agent.gpuprov_agent_path,
        python=plan.agent.gpuprov_python,
        upload=upload,
    )
    limit = plan.timeouts.gpuprov_timeout_mig
    first = applied(name="MIG as planned (incremental)", _timeout=limit, **kwargs)
    if not reboot:
        return [first]
    restart = server.reboot(
        name="reboot: the MIG mode change needs it (mig_reboot)",
        delay=5,
        reboot_timeout=600,
        _timeout=reboot_limit(5, 600),
        _if=lambda: reboot_requested(first),
    )
    after = applied(
        name="MIG as planned, after the reboot", _if=changed(restart), _timeout=limit, **kwargs
    )
    return [first, after]
