"""The NVIDIA device plugin's config: time-slicing or MPS on ``shared`` hosts, the MIG strategy on
``mig`` hosts, none on ``whole_card`` and ``vgpu`` hosts (a config left by an earlier mode is
removed). The plugin restarts (``device_plugin_reload_command``) whenever what it advertises
changed: its config, or the GPUs' MIG layout or mode. Nothing changed, no restart. The text comes
from ``gpuprov.hostfiles.device_plugin``, the model verify checks against."""

from __future__ import annotations

from collections.abc import Sequence

from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta
from pyinfra.operations import server

from gpuprov.deploys.view import HostView, Watch, changed, ensure_file
from gpuprov.hostfiles import device_plugin as config


def watch(settings: dict) -> Watch:
    return Watch(paths=(settings["device_plugin_config_path"],))


@deploy("Device plugin config")
def device_plugin(view: HostView, mig_changes: Sequence[OperationMeta] = ()) -> None:
    """The config file, then the plugin restarted if the file or the GPUs' MIG state changed.

    ``mig_changes`` are the MIG apply operations of this run (``gpuprov.deploys.mig``). The
    plugin enumerates its devices only when it (re)starts its plugins and never notices a MIG
    change by itself (NVIDIA/k8s-device-plugin#992): after a re-layout it keeps advertising the
    old MIG devices. Its SIGHUP handler is such a restart: it stops every plugin, loads the
    config and builds the device lists again from NVML (``goto restart`` -> ``startPlugins`` ->
    ``GetPlugins`` in cmd/nvidia-device-plugin/main.go,
    https://github.com/NVIDIA/k8s-device-plugin/blob/v0.20.0/cmd/nvidia-device-plugin/main.go),
    so the same reload command serves a config change and a MIG change.

        device_plugin(view, mig_changes=mig.mig_layout(view))
    """
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
    triggers = [t for t in (op, *mig_changes) if t is not None]
    if triggers:
        server.shell(
            name="device plugin restarts: its config or the GPUs' MIG state changed",
            commands=[view.settings["device_plugin_reload_command"]],
            _if=changed(*triggers),
            _timeout=view.settings["gpuprov_timeout_service"],
        )
