"""The NVIDIA device plugin's config: time-slicing or MPS on ``shared`` hosts, the MIG strategy on
``mig`` hosts, none on ``whole_card`` and ``vgpu`` hosts (a config left by an earlier mode is
removed); the plugin re-reads it only when it changed.
The text comes from ``gpuprov.hostfiles.device_plugin``, the model verify checks against."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import server

from gpuprov.deploys.view import HostView, Watch, changed, ensure_file
from gpuprov.hostfiles import device_plugin as config


def watch(settings: dict) -> Watch:
    return Watch(paths=(settings["device_plugin_config_path"],))


@deploy("Device plugin config")
def device_plugin(view: HostView) -> None:
    path = view.settings["device_plugin_config_path"]
    text = config.render(view.plan)
    what = {
        "shared": f"{view.plan.time_slicing.strategy} x{view.plan.time_slicing.replicas}"
        if view.plan.time_slicing
        else "",
        "mig": f"MIG {view.plan.mig_strategy}",
        "whole_card": "none (whole cards)",
        "vgpu": f"none ({view.plan.vgpu.flavour}'s vGPU plugin serves the GPUs)"
        if view.plan.vgpu
        else "",
    }[view.plan.mode]
    op = ensure_file(
        view, f"device plugin config: {what}", path, text or "", present=text is not None
    )
    if op:
        server.shell(
            name="device plugin re-reads its config",
            commands=[view.settings["device_plugin_reload_command"]],
            _if=changed(op),
            _timeout=view.settings["gpuprov_timeout_service"],
        )
